"""Where the lab keeps its state, and the fixed names it uses on this machine.

The paths here are the ones `playbooks/nodes/lab.yaml` names, so a change here is a change
there too (tests/test_lab_profile.py keeps them in step).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from abtest.lab.files import write_file

STATE_DIR = Path("/var/lib/abtest-lab")
RUN_DIR = Path("/run/abtest-lab")
NODE_NAME = "abtest-lab"
SSH_USER = "abtest"
SSH_ALIAS = "abtest-lab"

# The API server refuses to proxy to loopback addresses, so the node's name resolves to an
# address inside a network namespace the lab creates; a socat pair there forwards to the
# kubelet on 127.0.0.1 through a unix socket. Nothing listens outside loopback and that netns.
NETNS = "abtest-lab"
VETH_HOST = "abtlab0"
VETH_NODE = "abtlab1"
VETH_HOST_IP = "10.251.0.1"
NODE_PROXY_IP = "10.251.0.2"
HOSTS_MARK = "# abtest-lab node proxy"
POD_BRIDGE = "abtlab-br0"
POD_SUBNET = "10.252.0.0/16"
SERVICE_SUBNET = "10.253.0.0/24"
KUBELET_API_BURST = 10
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36.1"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class Paths:
    root: Path = STATE_DIR
    run: Path = RUN_DIR

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_pki(self) -> Path:
        """etcd's own CA and certs (kubeadm's layout): see pki.py."""
        return self.pki / "etcd"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.run / "pids"

    @property
    def ssh(self) -> Path:
        return self.root / "ssh"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.kubelet_dir / "config.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd" / "containerd.sock"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def home(self) -> Path:
        """The lab SSH user's home directory (how `down` recognises the user as the lab's)."""
        return self.root / "home"

    def all_dirs(self) -> list[Path]:
        """Every directory `up` creates, parents first; all created 0700 (files.make_dir)."""
        return [
            self.root,
            self.run,
            self.bin,
            self.pki,
            self.etcd_pki,
            self.logs,
            self.pids,
            self.ssh,
            self.kubelet_dir,
            self.etcd_data,
            self.root / "cni",
            self.root / "cni" / "net.d",
            self.root / "containerd",
            self.root / "images",
            self.run / "containerd",
        ]


@dataclass
class LabState:
    """What `lab up` decided (ports) and changed on the host, so `down` can undo exactly it.

    ip_forward_before: the host's net.ipv4.ip_forward before `up` set it (None: `up` has
    not changed it since the last `down`). mounted_cgroups: cgroup v1 controllers `up`
    mounted; cgroup_dirs_made: the mount points it had to create for them."""

    ports: dict[str, int] = field(default_factory=dict)
    ip_forward_before: str | None = None
    mounted_cgroups: list[str] = field(default_factory=list)
    cgroup_dirs_made: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)

    def save(self, paths: Paths) -> None:
        write_file(paths.state_file, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, paths: Paths) -> LabState | None:
        if not paths.state_file.exists():
            return None
        raw = json.loads(paths.state_file.read_text())
        # A state written by another version of the lab may lack fields (defaults apply) or
        # carry ones this version does not know (ignored rather than refusing to go down).
        known = {f.name for f in dataclasses.fields(cls)}
        if "cgroup_dirs_made" not in raw:
            # Before it was recorded, `up` created the mount point of every controller it
            # mounted when missing (a VM has none of them), so `down` removes those empty
            # directories too.
            raw["cgroup_dirs_made"] = list(raw.get("mounted_cgroups", []))
        return cls(**{k: v for k, v in raw.items() if k in known})
