"""Host preparation for the lab and its exact undo: packages, cgroups, sysctl, networking."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from abtest.errors import LabError
from abtest.lab import layout, runtimes
from abtest.lab.files import PUBLIC_FILE, replace_system_file, write_file
from abtest.lab.processes import run

# Debian package -> a file it installs that the lab needs. containerd is not one of them: the
# lab builds upstream's (binaries.CONTAINERD_VERSION); Debian's, where installed, is not used.
PACKAGES = {
    "runc": "/usr/sbin/runc",
    # The lab's second runtime handler (runtimes.py), next to runc.
    "crun": "/usr/bin/crun",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "busybox-static": "/bin/busybox",
    "openssh-server": "/usr/sbin/sshd",
    "iptables": "/usr/sbin/iptables",
    "conntrack": "/usr/sbin/conntrack",
    "socat": "/usr/bin/socat",
    "sudo": "/usr/bin/sudo",
    "iproute2": "/usr/sbin/ip",
    "mount": "/usr/bin/mount",
}
CGROUP_CONTROLLERS = ("hugetlb", "net_cls", "perf_event", "net_prio")
HOSTS = Path("/etc/hosts")


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (it runs containerd and kubelet); run it with sudo")


def ensure_packages(say: object = print, packages: dict[str, str] | None = None) -> list[str]:
    """Install the Debian packages the lab needs (or `packages`: package -> a file it
    installs); returns the ones it installed."""
    emit = say if callable(say) else print
    wanted = PACKAGES if packages is None else packages
    missing = [pkg for pkg, path in wanted.items() if not Path(path).exists()]
    if not missing:
        return []
    if shutil.which("apt-get") is None:
        raise LabError(f"missing packages {', '.join(missing)} and no apt-get to install them")
    emit(f"installing Debian packages: {', '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        proc = subprocess.run(args, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise LabError(
                f"could not install {', '.join(missing)}: `{' '.join(args)}` failed:\n"
                + "\n".join(tail)
            )
    still = [pkg for pkg in missing if not Path(wanted[pkg]).exists()]
    if still:
        raise LabError(f"apt-get ran but {', '.join(still)} is still missing")
    return missing


CGROUP_ROOT = Path("/sys/fs/cgroup")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def mount_cgroups(root: Path = CGROUP_ROOT) -> tuple[list[str], list[str]]:
    """Mount the cgroup v1 controllers the VM leaves unmounted.

    Returns (controllers mounted, mount points created for them) so `down` can undo
    exactly that and nothing the host had before."""
    if (root / "cgroup.controllers").exists():
        return [], []  # pure cgroup v2: nothing to mount
    mounted: list[str] = []
    made: list[str] = []
    for name in CGROUP_CONTROLLERS:
        target = root / name
        if target.is_dir() and any(target.iterdir()):
            continue
        if not target.exists():
            target.mkdir()
            made.append(name)
        proc = subprocess.run(
            ["mount", "-t", "cgroup", "-o", name, "cgroup", str(target)], capture_output=True
        )
        if proc.returncode == 0:
            mounted.append(name)
    return mounted, made


def unmount_cgroups(mounted: list[str], made: list[str], root: Path = CGROUP_ROOT) -> list[str]:
    """Undo mount_cgroups: unmount what it mounted, remove the mount points it created.

    Returns what could not be undone (one line each); the caller keeps those in its state."""
    problems = []
    for name in mounted:
        target = root / name
        if is_mount_point(target):
            proc = subprocess.run(["umount", str(target)], capture_output=True, text=True)
            if proc.returncode != 0:
                problems.append(f"cgroup mount {target}: umount failed: {proc.stderr.strip()}")
                continue
    for name in made:
        target = root / name
        if name in mounted and is_mount_point(target):
            continue  # reported above
        try:
            target.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"cgroup mount point {target}: cannot remove ({exc.strerror})")
    return problems


def is_mount_point(path: Path) -> bool:
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    return any(len(m.split()) > 1 and m.split()[1] == str(path) for m in mounts)


def set_ip_forward() -> str:
    """Turn on IPv4 forwarding for the pod bridge; returns the value it had."""
    before = IP_FORWARD.read_text().strip()
    if before != "1":
        IP_FORWARD.write_text("1\n")
    return before


def restore_ip_forward(before: str | None) -> None:
    """Put back the value `up` found. Compared with the current value, not assumed: the
    CNI bridge plugin turns forwarding on by itself when it creates the pod gateway."""
    if before is not None and IP_FORWARD.read_text().strip() != before:
        IP_FORWARD.write_text(f"{before}\n")


def setup_node_proxy_netns(node: layout.Node | None = None) -> None:
    """The netns + veth that give a node a proxyable address (see layout.NETNS); each
    node has its own netns, veth pair and /30."""
    node = node or layout.Node(1)
    netns = run(["ip", "netns", "list"], check=False)
    if node.netns not in netns.split():
        run(["ip", "netns", "add", node.netns])
    links = run(["ip", "-o", "link", "show"], check=False)
    if f" {node.veth_host}@" not in links and f" {node.veth_host}:" not in links:
        run(
            [
                "ip",
                "link",
                "add",
                node.veth_host,
                "type",
                "veth",
                "peer",
                "name",
                node.veth_node,
                "netns",
                node.netns,
            ]
        )
        run(["ip", "addr", "add", f"{node.host_ip}/30", "dev", node.veth_host])
        run(["ip", "link", "set", node.veth_host, "up"])
        ns = ["ip", "netns", "exec", node.netns]
        run([*ns, "ip", "addr", "add", f"{node.proxy_ip}/30", "dev", node.veth_node])
        run([*ns, "ip", "link", "set", node.veth_node, "up"])
        run([*ns, "ip", "link", "set", "lo", "up"])


def add_hosts_entry(hosts: Path = HOSTS, nodes: list[layout.Node] | None = None) -> None:
    """Each node's name -> its proxy address, for the API server's kubelet connections.
    The lab's lines (marked) are made exactly these: a removed node's line goes."""
    nodes = nodes if nodes is not None else [layout.Node(1)]
    text = hosts.read_text()
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if layout.HOSTS_MARK not in ln]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    ours = [f"{n.proxy_ip} {n.name} {layout.HOSTS_MARK}\n" for n in nodes]
    new = "".join(kept + ours)
    if new != text:
        replace_system_file(hosts, new)


def remove_hosts_entry(hosts: Path = HOSTS) -> None:
    lines = hosts.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if layout.HOSTS_MARK not in ln]
    if kept != lines:
        replace_system_file(hosts, "".join(kept))


def teardown_networking(nodes: list[layout.Node] | None = None) -> None:
    """Remove the nodes' veth pairs, netns and pod bridges, and (for the whole lab, i.e.
    no list given) every marked /etc/hosts line; a list removes only those nodes' lines."""
    for node in nodes if nodes is not None else [layout.Node(1)]:
        run(["ip", "link", "del", node.veth_host], check=False)
        run(["ip", "netns", "del", node.netns], check=False)
        run(["ip", "link", "del", node.pod_bridge], check=False)
    if nodes is None:
        remove_hosts_entry()


def write_cni_config(node: layout.Node) -> None:
    conf = {
        "cniVersion": "1.0.0",
        "name": node.name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.pod_bridge,
                "isGateway": True,
                # No masquerade and no portmap: the lab adds no iptables rules and pods
                # reach nothing outside this machine.
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_subnet}]],
                    "dataDir": str(node.cni_dir / "ipam"),
                },
            }
        ],
    }
    write_file(
        node.cni_dir / "net.d" / f"10-{node.name}.conflist",
        json.dumps(conf, indent=2),
        PUBLIC_FILE,
    )


def write_containerd_config(node: layout.Node) -> Path:
    path = node.containerd_dir / "config.toml"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    write_file(
        path,
        f"""version = 2
root = "{node.containerd_dir / "root"}"
state = "{node.run / "containerd" / "state"}"

[grpc]
  address = "{node.containerd_socket}"

[ttrpc]
  address = "{node.run / "containerd" / "containerd.sock.ttrpc"}"

[{cri}]
  sandbox_image = "{layout.PAUSE_IMAGE}"
  # The VM lacks CAP_SYS_RESOURCE: without this every sandbox fails on oom_score_adj.
  restrict_oom_score_adj = true
{runtimes.containerd_runtimes_toml(cri)}  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{node.cni_dir / "net.d"}"
""",
        PUBLIC_FILE,
    )
    return path


def make_cgroup_root(name: str, root: Path = CGROUP_ROOT) -> None:
    """Create a node's cgroup root (`/abtest-lab-2`) in every hierarchy where the host has
    a cgroup mounted: the kubelet refuses a cgroupRoot that does not exist. A new cpuset
    cgroup has no CPUs or memory nodes: the parent's are copied, or no task could join."""
    for hierarchy in sorted(root.iterdir()):
        if not is_mount_point(hierarchy):
            continue
        target = hierarchy / name.strip("/")
        if target.is_dir():
            continue
        target.mkdir()
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / knob).exists() and not (target / knob).read_text().strip():
                (target / knob).write_text((hierarchy / knob).read_text())


def remove_kubepods_cgroups(
    tops: tuple[str, ...] = ("kubepods",), root: Path = CGROUP_ROOT
) -> None:
    """Remove the (empty) cgroups kubelet created under each of `tops` (and `tops`
    themselves), deepest first; busy ones stay."""
    for controller in root.iterdir():
        for name in tops:
            _remove_cgroup_tree(controller / name.strip("/"))


def _remove_cgroup_tree(top: Path) -> None:
    if top.is_dir():
        for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir():
                # A busy cgroup stays; `lab status` lists what is left (residue.py).
                with contextlib.suppress(OSError):
                    path.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def unmount_under(prefixes: list[Path]) -> None:
    """Lazily unmount anything containerd/kubelet left mounted below the lab's directories."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    targets = [m.split()[1] for m in mounts if len(m.split()) > 1]
    for target in sorted(targets, key=len, reverse=True):
        if any(target.startswith(str(p) + "/") for p in prefixes):
            subprocess.run(["umount", "-l", target], capture_output=True)
