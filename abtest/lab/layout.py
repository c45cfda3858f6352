"""Where the lab keeps its state, and the fixed names it uses on this machine.

The paths of node 1 are the ones `playbooks/nodes/lab.yaml` names, so a change here is a
change there too. Nodes 2..N (`lab up --nodes N`) live under `<state>/nodes/<name>/` and
`<run>/nodes/<name>/`, each with its own profile written by the lab (see `Node`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from abtest.lab.files import write_file

#: how a lab step says what it does (print, or the CLI's progress line)
Say = Callable[[str], None]

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
_SERVICES = ipaddress.ip_network(SERVICE_SUBNET)
# The `kubernetes` Service's address (the range's first), which the API server's certificate
# must name for in-cluster clients.
API_SERVICE_IP = str(_SERVICES[1])
# The cluster DNS address every real node's kubelet is given (kubeadm: the service range's
# tenth address). Nothing answers there (pods in the lab resolve no names), but without it the
# kubelet falls back to the host's resolv.conf for every ClusterFirst pod and writes a
# MissingClusterDNS warning event at each of the pod's syncs: on the lab 1 create and 3 patches
# per pod, 200 of a 50-pod batch's ~450 API writes, which no node in a pool carries.
CLUSTER_DNS_IP = str(_SERVICES[10])
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36.1"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# How many nodes `lab up --nodes N` may run on this machine. Each extra node is a kubelet
# and a containerd: ~126 MiB RSS (kubelet ~80, containerd ~47) and ~1-1.2 % of one core at
# idle (measured on the lab, 30 s windows). Memory would allow dozens; the cap is the 2
# cores: a fleet sweep runs a batch on every node at once through one API server, and three
# concurrent batches already queue for CPU, so more nodes would time the neighbours.
MAX_NODES = 3


@dataclass(frozen=True)
class Paths:
    root: Path = STATE_DIR
    run: Path = RUN_DIR

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def kubelets(self) -> Path:
        """Extra kubelet releases placed for kubelet_build arms (``<version>/kubelet``); the
        lab profile's ``kubelet.builds_dir``."""
        return self.root / "kubelets"

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


@dataclass(frozen=True)
class Node:
    """One of the lab's nodes: its name, files, processes, ports and addresses.

    Node 1 is the original single-node layout, unchanged (playbooks/nodes/lab.yaml names
    its paths). Every other node has its own containerd (root, state dir, socket: its
    kubelet's container GC never sees another node's sandboxes), kubelet root dir, config,
    certificates, binary copy, service script, log, pid files, lock, cgroup root, pod log
    dir, pod bridge and subnet, and its own netns with a proxyable address. All nodes share
    the control plane and the one sshd ("the node" for SSH: each profile names its paths)."""

    index: int
    paths: Paths = field(default_factory=Paths)

    @property
    def first(self) -> bool:
        return self.index == 1

    @property
    def name(self) -> str:
        return NODE_NAME if self.first else f"{NODE_NAME}-{self.index}"

    @property
    def home(self) -> Path:
        return self.paths.root if self.first else self.paths.root / "nodes" / self.name

    @property
    def run(self) -> Path:
        return self.paths.run if self.first else self.paths.run / "nodes" / self.name

    @property
    def bin(self) -> Path:
        """Holds the node's kubelet binary (its own copy, so a candidate binary swapped in
        on one node is not the others') and its kubelet-service script."""
        return self.paths.bin if self.first else self.home / "bin"

    @property
    def pids(self) -> Path:
        return self.paths.pids if self.first else self.run / "pids"

    @property
    def logs(self) -> Path:
        return self.paths.logs if self.first else self.home / "logs"

    @property
    def pki(self) -> Path:
        """Where the node's kubelet client and serving certificates are."""
        return self.paths.pki if self.first else self.home / "pki"

    @property
    def kubelet_dir(self) -> Path:
        return self.home / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.kubelet_dir / "config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.home / "kubelet.kubeconfig"

    @property
    def containerd_dir(self) -> Path:
        return self.home / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd" / "containerd.sock"

    @property
    def cni_dir(self) -> Path:
        return self.home / "cni"

    @property
    def bridge_sock(self) -> Path:
        return self.run / "kubelet-bridge.sock"

    @property
    def lock_path(self) -> Path:
        return self.home / "node.lock"

    @property
    def profile(self) -> Path | None:
        """The node profile the lab writes (node 1 uses the shipped playbooks/nodes/lab.yaml)."""
        return None if self.first else self.home / "profile.yaml"

    @property
    def netns(self) -> str:
        return NETNS if self.first else f"{NETNS}-{self.index}"

    @property
    def veth_host(self) -> str:
        return f"abtlab{2 * (self.index - 1)}"

    @property
    def veth_node(self) -> str:
        return f"abtlab{2 * (self.index - 1) + 1}"

    @property
    def host_ip(self) -> str:
        return f"10.251.0.{4 * (self.index - 1) + 1}"

    @property
    def proxy_ip(self) -> str:
        """The node's address for the API server (its name resolves to it, /etc/hosts)."""
        return f"10.251.0.{4 * (self.index - 1) + 2}"

    @property
    def pod_bridge(self) -> str:
        return f"abtlab-br{self.index - 1}"

    @property
    def pod_subnet(self) -> str:
        return POD_SUBNET if self.first else f"10.254.{self.index}.0/24"

    @property
    def cgroup_root(self) -> str | None:
        """Two kubelets under one `kubepods` would each remove the other's pod cgroups as
        orphans, so nodes 2..N get their own cgroup root (as kind's nodes do)."""
        return None if self.first else f"/{self.name}"

    @property
    def pod_logs_dir(self) -> Path | None:
        """A kubelet removes the /var/log/pods directories of pods it does not know, so
        nodes 2..N keep their pods' logs in their own directory."""
        return None if self.first else self.home / "pod-logs"

    def port_key(self, kind: str) -> str:
        """The key of this node's `kind` port ("kubelet", "kubelet_healthz") in state.ports."""
        return kind if self.first else f"{kind}_{self.index}"

    def dirs(self) -> list[Path]:
        """The node's own directories, parents first (node 1's are in Paths.all_dirs)."""
        if self.first:
            return []
        out = [
            self.paths.root / "nodes",
            self.home,
            self.paths.run / "nodes",
            self.run,
            self.bin,
            self.pids,
            self.logs,
            self.pki,
            self.kubelet_dir,
            self.containerd_dir,
            self.cni_dir,
            self.cni_dir / "net.d",
            self.run / "containerd",
        ]
        if self.pod_logs_dir is not None:
            out.append(self.pod_logs_dir)
        return out


def nodes(count: int, paths: Paths | None = None) -> list[Node]:
    paths = paths or Paths()
    return [Node(i, paths) for i in range(1, count + 1)]


def node_index(name: str) -> int | None:
    """The index of a lab node by its name (abtest-lab -> 1, abtest-lab-3 -> 3), else None."""
    if name == NODE_NAME:
        return 1
    prefix = NODE_NAME + "-"
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() and int(rest) >= 2 and str(int(rest)) == rest else None


@dataclass
class LabState:
    """What `lab up` decided (ports) and changed on the host, so `down` can undo exactly it.

    ip_forward_before: the host's net.ipv4.ip_forward before `up` set it (None: `up` has
    not changed it since the last `down`). mounted_cgroups: cgroup v1 controllers `up`
    mounted; cgroup_dirs_made: the mount points it had to create for them. nodes: how many
    nodes the last `up` brought up (`--nodes`)."""

    ports: dict[str, int] = field(default_factory=dict)
    ip_forward_before: str | None = None
    mounted_cgroups: list[str] = field(default_factory=list)
    cgroup_dirs_made: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    nodes: int = 1
    #: the Kubernetes release the lab's binaries are (None: a state from before releases
    #: were recorded, which ran v1.34.4)
    kubernetes: str | None = None
    #: the containerd version the last `up` ran (None: a state from before the lab built
    #: its own, which ran Debian's containerd 1.6)
    containerd: str | None = None
    #: whether the last `up` ran the systemd node (`--systemd-node`, sdnode.py)
    systemd_node: bool = False
    #: the delay on the kubelets' way to the API server (`up --api-latency`, api_proxy.py)
    api_latency_ms: int = 0
    api_jitter_ms: int = 0
    #: KiB of requests after which the proxy cuts a kubelet connection (`up --api-faults`)
    api_faults_kib: int = 0

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
