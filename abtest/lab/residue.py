"""What of the lab is still on this machine: `lab status` lists it, `lab down` checks it.

Two lists. `left_behind`: things `up` adds to the host that `down` must take away again
(processes, mounts, cgroups, network devices, the /etc/hosts line, ip_forward, the SSH
user and its sudoers file, the run directory); after a successful `down` it is empty.
`kept`: what `down` keeps on purpose so the next `up` takes seconds and the cluster keeps
its state (the state directory with certificates, etcd data and kubelet config);
`down --purge` removes it. The binary cache (~/.cache/abtest) is always kept: it is a
build cache, not lab state.
"""

from __future__ import annotations

import re
from pathlib import Path

from abtest.lab import components, host, layout, sdnode_run, sshd
from abtest.lab.layout import LabState, Node, Paths
from abtest.lab.processes import alive, each_process, read_pid

# Programs the lab runs; a process counts as the lab's when it is one of these and its
# command line names a lab directory (containerd's shims name the lab's socket).
LAB_PROGRAMS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "containerd-shim",
    "containerd-shim-runc-v2",
    "sshd",
    "socat",
    # the kubelets' API proxy (api_proxy.py)
    "toxiproxy-server",
    # the systemd node's (its command line names its root filesystem in the state dir)
    "systemd-nspawn",
)


def lab_processes(paths: Paths) -> list[tuple[int, str]]:
    """(pid, program) of the lab's processes still alive, found by command line."""
    marks = (str(paths.root) + "/", str(paths.run) + "/")
    found = []
    for pid, argv in each_process(lambda entry: (entry / "cmdline").read_bytes().split(b"\0")):
        if not argv or not argv[0]:
            continue
        program = Path(argv[0].decode(errors="replace")).name
        line = b" ".join(argv).decode(errors="replace")
        if program in LAB_PROGRAMS and any(m in line for m in marks) and alive(pid):
            found.append((pid, program))
    return sorted(found)


def left_behind(paths: Paths, state: LabState | None = None) -> list[str]:
    """What `down` should have taken away and is still here, one line each."""
    state = state if state is not None else LabState.load(paths)
    out: list[str] = []
    first = Node(1, paths)
    for comp in components.COMPONENTS:
        pid = comp.running(first)
        if pid is not None:
            out.append(f"process: {comp.name} (pid {pid}) is running")
    named = {read_pid(paths.pids, n) for n in components.ORDER}
    extra = [Node(i, paths) for i in _other_node_indexes(paths)]
    for node in extra:
        for comp in components.PER_NODE:
            named.add(read_pid(node.pids, comp.name))
            pid = comp.running(node)
            if pid is not None:
                out.append(f"process: {node.name} {comp.name} (pid {pid}) is running")
    for pid, program in lab_processes(paths):
        if pid not in named:
            out.append(f"process: {program} (pid {pid}) runs from the lab's directories")
    pw = sshd.lab_user(paths)
    if pw is not None:
        out.append(f"user: {layout.SSH_USER} (uid {pw.pw_uid})")
    if sshd.SUDOERS.exists():
        out.append(f"file: {sshd.SUDOERS}")
    out += [f"mount: {m}" for m in _mounts_under([paths.root, paths.run])]
    if state is not None:
        for name in state.mounted_cgroups:
            target = host.CGROUP_ROOT / name
            if host.is_mount_point(target):
                out.append(f"cgroup mount: {target} (mounted by `lab up`)")
        for name in state.cgroup_dirs_made:
            target = host.CGROUP_ROOT / name
            if target.is_dir() and not host.is_mount_point(target):
                out.append(f"directory: {target} (made by `lab up` as a mount point)")
        if state.ip_forward_before is not None:
            now = host.IP_FORWARD.read_text().strip()
            out.append(
                f"sysctl: net.ipv4.ip_forward={now} (it was {state.ip_forward_before} "
                "before `lab up`)"
            )
    if host.CGROUP_ROOT.is_dir():
        for controller in sorted(host.CGROUP_ROOT.iterdir()):
            for top in sorted(controller.iterdir()) if controller.is_dir() else []:
                if top.is_dir() and (
                    top.name == "kubepods" or (layout.node_index(top.name) or 0) >= 2
                ):
                    out.append(f"cgroup: {top}")
    netns = Path("/run/netns")
    for entry in sorted(netns.iterdir()) if netns.is_dir() else []:
        if layout.node_index(entry.name) is not None:
            out.append(f"netns: {entry.name}")
    links = Path("/sys/class/net")
    for entry in sorted(links.iterdir()) if links.is_dir() else []:
        if LINK.fullmatch(entry.name):
            out.append(f"network link: {entry.name}")
    if host.HOSTS.exists():
        for line in host.HOSTS.read_text().splitlines():
            if layout.HOSTS_MARK in line:
                out.append(f"/etc/hosts: the line {line.strip()!r}")
    out += [line for line in sdnode_run.left_behind(paths) if line not in out]
    if paths.run.exists():
        out.append(f"directory: {paths.run}")
    return out


# The lab's veth ends (abtlab0, abtlab1, ...) and pod bridges (abtlab-br0, ...).
LINK = re.compile(r"abtlab(-br)?[0-9]+")


def _other_node_indexes(paths: Paths) -> list[int]:
    found: set[int] = set()
    for parent in (paths.root / "nodes", paths.run / "nodes"):
        if parent.is_dir():
            found |= {layout.node_index(e.name) or 0 for e in parent.iterdir()}
    return sorted(i for i in found if i >= 2)


def kept(paths: Paths) -> list[str]:
    """What `down` keeps on purpose (removed by `down --purge`)."""
    if not paths.root.exists():
        return []
    return [
        f"directory: {paths.root} (certificates, etcd data, kubelet config, SSH keys; "
        "`abtest lab down --purge` removes it)"
    ]


def _mounts_under(prefixes: list[Path]) -> list[str]:
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    targets = [m.split()[1] for m in mounts if len(m.split()) > 1]
    return sorted(t for t in targets if any(t.startswith(str(p) + "/") for p in prefixes))
