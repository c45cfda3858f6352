"""The lab's systemd node (`lab up --systemd-node`): a node shaped like the users' nodes.

A Debian container booted by `systemd-nspawn` with systemd as its PID 1: containerd, the
kubelet and sshd are systemd units, and the kubelet's files are where kubeadm puts them
(sdnode_files.py). The container runs in a network namespace the lab makes, with a veth
to this machine: the API server (on loopback) is reached through a socat on the host end
of the veth, and the API server reaches the kubelet at the node's address, which its
name resolves to (/etc/hosts). It is joined with a client certificate from the lab's CA.

The container is tracked by two pids, nspawn's and the container init's (the init can
outlive nspawn, adopted by this machine's PID 1): `down` powers the init off by pid and
SIGKILLs it if it does not go, which ends everything in its pid namespace. Everything of
the node lives in its own cgroup, netns and state directory, so `down` leaves nothing.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from abtest.config import datafiles
from abtest.errors import LabError
from abtest.lab import components, host, layout, pki, sdnode_image, sshd
from abtest.lab import sdnode_files as sf
from abtest.lab.files import PRIVATE_FILE, PUBLIC_FILE, install_binary, make_dir, write_file
from abtest.lab.layout import Paths, Say
from abtest.lab.processes import run

NAME = "abtest-lab-systemd"
SSH_USER = sdnode_image.SSH_USER
NETNS = NAME
CGROUP = NAME
VETH_HOST = "abtsd0"
VETH_NODE = "abtsd1"
HOST_IP = "10.251.0.249"
NODE_IP = "10.251.0.250"
POD_SUBNET = "10.254.200.0/24"
HOSTS_MARK = "# abtest-lab systemd node"
#: where `abtest lab kubelets` places kubelet builds inside the node (its profile's builds_dir)
BUILDS_DIR = "/var/lib/abtest-kubelets"


@dataclass(frozen=True)
class SystemdNode:
    paths: Paths

    @property
    def home(self) -> Path:
        return self.paths.root / "systemd-node"

    @property
    def run(self) -> Path:
        return self.paths.run / "systemd-node"

    @property
    def rootfs(self) -> Path:
        return self.home / "rootfs"

    @property
    def ssh(self) -> Path:
        return self.home / "ssh"

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def pids(self) -> Path:
        return self.run / "pids"

    @property
    def profile(self) -> Path:
        return self.home / "profile.yaml"

    def dirs(self) -> list[Path]:
        return [self.home, self.ssh, self.pki, self.logs, self.run, self.pids]

    def file(self, path: str) -> Path:
        """A file of the node, as this machine sees it in the node's root filesystem."""
        return sf.in_root(self.rootfs, path)


def binaries(paths: Paths) -> dict[str, Path]:
    """Node path -> this machine's file, for the binaries bound read-only into the node.
    containerd is whatever the lab's own nodes run (components.argv_for is where that is
    decided), its runc shim beside it."""
    name = components.argv_for("containerd", paths, {}).argv[0]
    found = shutil.which(name)
    if found is None:
        raise LabError(f"the systemd node needs containerd: {name!r} is not on this machine")
    containerd = Path(found).resolve()
    return {
        "/usr/bin/containerd": containerd,
        "/usr/bin/containerd-shim-runc-v2": containerd.parent / "containerd-shim-runc-v2",
        "/usr/sbin/runc": Path(host.PACKAGES["runc"]),
        "/usr/bin/crictl": paths.bin / "crictl",
        "/opt/cni/bin": Path(host.PACKAGES["containernetworking-plugins"]).parent,
    }


# --- prepare --------------------------------------------------------------------------------


def prepare(node: SystemdNode, ports: dict[str, int], ca: pki.CertPair, say: Say) -> None:
    """The node's root filesystem and files (idempotent). A kept node keeps its kubelet
    config and flag files as they are: an experiment's journaled change may be in them."""
    host.ensure_packages(say, sdnode_image.BUILD_TOOLS)
    image = sdnode_image.ensure_image(say)
    for d in node.dirs():
        make_dir(d)
    if not node.rootfs.is_dir():
        t0 = time.monotonic()
        tmp = node.home / ".rootfs.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        run(["cp", "-a", "--reflink=auto", str(image), str(tmp)])
        tmp.rename(node.rootfs)
        say(f"  {NAME}: root filesystem copied from the image in {time.monotonic() - t0:.1f} s")
    _install_kubelet(node)
    _write_pki(node, ports, ca)
    _write_kubeadm_files(node)
    _write_ssh(node)
    write_file(node.profile, profile_text(node), PUBLIC_FILE)


def _install_kubelet(node: SystemdNode) -> None:
    """The node's own copy at kubeadm's /usr/bin/kubelet (a kubelet_build arm swaps it)."""
    install_binary(node.paths.bin / "kubelet", node.file("/usr/bin/kubelet"))


def _put(node: SystemdNode, path: str, text: str | bytes, mode: int = PUBLIC_FILE) -> None:
    target = node.file(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file(target, text, mode)


def _put_new(node: SystemdNode, path: str, text: str) -> None:
    """Written only when missing: the files an experiment may have changed (and journaled)."""
    if not node.file(path).exists():
        _put(node, path, text)


def _write_pki(node: SystemdNode, ports: dict[str, int], ca: pki.CertPair) -> None:
    client = pki.issue(
        ca, node.pki, "kubelet-client", f"system:node:{NAME}", org="system:nodes", client=True
    )
    serving = pki.issue(
        ca,
        node.pki,
        "kubelet-serving",
        f"system:node:{NAME}",
        server=True,
        dns=(NAME, "localhost"),
        ips=(NODE_IP, "127.0.0.1"),
    )
    _put(node, sf.CA_CERT, ca.cert.read_bytes())
    # kubeadm's rotation store: the kubelet's serving pair and its client cert+key in one.
    _put(node, f"{sf.KUBELET_PKI}/kubelet.crt", serving.cert.read_bytes())
    _put(node, f"{sf.KUBELET_PKI}/kubelet.key", serving.key.read_bytes(), PRIVATE_FILE)
    _put(
        node,
        f"{sf.KUBELET_PKI}/kubelet-client-current.pem",
        client.cert.read_bytes() + client.key.read_bytes(),
        PRIVATE_FILE,
    )
    _put(
        node,
        sf.KUBELET_KUBECONFIG,
        sf.kubelet_kubeconfig(f"https://{HOST_IP}:{sf.API_PORT}", ca.cert.read_bytes()),
        PRIVATE_FILE,
    )
    del ports


def _write_kubeadm_files(node: SystemdNode) -> None:
    _put(node, sf.KUBELET_UNIT, sf.KUBELET_SERVICE)
    _put(node, sf.KUBEADM_DROPIN, sf.TEN_KUBEADM)
    _put_new(node, sf.KUBELET_CONFIG, sf.kubelet_config(layout.CLUSTER_DNS_IP))
    _put_new(node, sf.KUBEADM_FLAGS, sf.kubeadm_flags(NODE_IP))
    _put_new(node, sf.DEFAULT_KUBELET, sf.DEFAULT_KUBELET_TEXT)
    _put(node, sf.LAB_DROPIN, sf.LAB_DROPIN_TEXT)
    node.file("/etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    _put(node, "/etc/systemd/system/containerd.service", sf.CONTAINERD_SERVICE)
    _put(node, f"/etc/systemd/system/{sf.CGROUPS_RW_UNIT}", sf.CGROUPS_RW_SERVICE)
    _put(node, "/etc/containerd/config.toml", sf.CONTAINERD_CONFIG)
    _put(node, "/etc/crictl.yaml", sf.CRICTL_YAML)
    _put(node, "/etc/cni/net.d/10-bridge.conflist", sf.cni_config(POD_SUBNET))
    _put(node, "/etc/hostname", NAME + "\n")
    # sudo looks its host's name up (Debian names it in /etc/hosts the same way).
    _put(
        node, "/etc/hosts", f"127.0.0.1 localhost\n{NODE_IP} {NAME}\n::1 localhost ip6-localhost\n"
    )
    for target, unit, path in (
        ("multi-user", "kubelet.service", sf.KUBELET_UNIT),
        ("multi-user", "containerd.service", "/etc/systemd/system/containerd.service"),
        ("sysinit", sf.CGROUPS_RW_UNIT, f"/etc/systemd/system/{sf.CGROUPS_RW_UNIT}"),
    ):
        wants = node.file(f"/etc/systemd/system/{target}.target.wants")
        wants.mkdir(parents=True, exist_ok=True)
        if not (wants / unit).is_symlink():
            (wants / unit).symlink_to(path)


def _write_ssh(node: SystemdNode) -> None:
    sshd.ensure_key_pairs(node.ssh, NAME)
    _put(
        node,
        "/etc/ssh/ssh_host_ed25519_key",
        (node.ssh / "host_ed25519").read_bytes(),
        PRIVATE_FILE,
    )
    _put(node, "/etc/ssh/ssh_host_ed25519_key.pub", (node.ssh / "host_ed25519.pub").read_bytes())
    _put(node, "/etc/ssh/sshd_config.d/abtest-lab.conf", sf.SSHD_CONFIG)
    uid, gid = _passwd_ids(node, sdnode_image.SSH_USER)
    home = node.file(f"/home/{sdnode_image.SSH_USER}")
    dot_ssh = home / ".ssh"
    make_dir(dot_ssh)
    os.chown(dot_ssh, uid, gid)
    keys = dot_ssh / "authorized_keys"
    write_file(keys, (node.ssh / "client_ed25519.pub").read_text(), PRIVATE_FILE)
    os.chown(keys, uid, gid)
    host_pub = (node.ssh / "host_ed25519.pub").read_text().split()
    write_file(node.ssh / "known_hosts", f"{NODE_IP} {host_pub[0]} {host_pub[1]}\n", PUBLIC_FILE)


def _passwd_ids(node: SystemdNode, user: str) -> tuple[int, int]:
    for line in node.file("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise LabError(f"{node.rootfs}: no user {user!r} in its /etc/passwd (rebuild the image)")


def profile_text(node: SystemdNode) -> str:
    """The shipped kubeadm-systemd.yaml, changed only in how the node is reached: its name
    in the API, the controller's kubeconfig, the SSH host, user, key and known_hosts.
    Each replaced line must be in the shipped file (else this fails, not a stale profile)."""
    shipped = datafiles.data_dir("playbooks") / "nodes" / "kubeadm-systemd.yaml"
    lines = shipped.read_text().splitlines(keepends=True)
    swaps = {
        "profile:": "profile: lab-systemd\n",
        # the builds `abtest lab kubelets` places in the node too (kubelet_build arms,
        # --kubelet-build): a real kubeadm node has none unless its team makes one
        "  binary_path:": f"  binary_path: /usr/bin/kubelet\n  builds_dir: {BUILDS_DIR}\n",
        "node_name:": f"node_name: {NAME}\n",
        "kubeconfig:": f"kubeconfig: {node.paths.kubeconfig}\n",
        "  host:": f"  host: {NODE_IP}\n",
        "  user:": f"  user: {sdnode_image.SSH_USER}\n",
        "  agent:": f"  agent: false\n  key: {node.ssh / 'client_ed25519'}\n",
        "  known_hosts:": f"  known_hosts: {node.ssh / 'known_hosts'}\n",
    }
    seen: set[str] = set()
    out = []
    for line in lines:
        key = next((k for k in swaps if line.startswith(k + " ")), None)
        if key is None or key in seen:
            out.append(line)
            continue
        seen.add(key)
        out.append(swaps[key])
    missing = sorted(set(swaps) - seen)
    if missing:
        raise LabError(
            f"{shipped} has no line {missing[0].strip()!r}: cannot derive {NAME}'s profile"
        )
    head = (
        f"# The lab's systemd node, written by `abtest lab up --systemd-node` from {shipped.name}\n"
        "# (rewritten by every `up`): only how the node is reached differs.\n"
    )
    return head + "".join(out)
