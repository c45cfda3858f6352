"""Running the lab's systemd node (sdnode.py says what it is): its network, the boot by
systemd-nspawn, its two pids, the units' states, the stop by pid, what it may leave behind,
and bringing it up or down within `lab up` / `lab down`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from abtest.errors import LabError
from abtest.lab import components, host, images, pki
from abtest.lab import sdnode_files as sf
from abtest.lab.files import replace_system_file
from abtest.lab.layout import LabState, Paths, Say
from abtest.lab.processes import alive, read_pid, run, start, stop, wait_until
from abtest.lab.sdnode import (
    CGROUP,
    HOST_IP,
    HOSTS_MARK,
    NAME,
    NETNS,
    NODE_IP,
    VETH_HOST,
    VETH_NODE,
    SystemdNode,
    binaries,
    prepare,
)

UNITS = ("containerd", "kubelet", "ssh")
BOOT_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 120.0
POWEROFF_WAIT_S = 30.0
KILL_WAIT_S = 10.0
SIGRTMIN_POWEROFF = signal.SIGRTMIN + 4  # systemd: SIGRTMIN+4 starts poweroff.target


# --- network --------------------------------------------------------------------------------


def setup_network() -> None:
    if NETNS not in run(["ip", "netns", "list"], check=False).split():
        run(["ip", "netns", "add", NETNS])
    if not Path(f"/sys/class/net/{VETH_HOST}").exists():
        run(
            [
                "ip",
                "link",
                "add",
                VETH_HOST,
                "type",
                "veth",
                "peer",
                "name",
                VETH_NODE,
                "netns",
                NETNS,
            ]
        )
        run(["ip", "addr", "add", f"{HOST_IP}/30", "dev", VETH_HOST])
        run(["ip", "link", "set", VETH_HOST, "up"])
        ns = ["ip", "netns", "exec", NETNS]
        run([*ns, "ip", "addr", "add", f"{NODE_IP}/30", "dev", VETH_NODE])
        run([*ns, "ip", "link", "set", VETH_NODE, "up"])
        run([*ns, "ip", "link", "set", "lo", "up"])
        run([*ns, "ip", "route", "add", "default", "via", HOST_IP])
    _hosts_line(add=True)


def teardown_network() -> None:
    run(["ip", "link", "del", VETH_HOST], check=False)
    run(["ip", "netns", "del", NETNS], check=False)
    _hosts_line(add=False)


def _hosts_line(add: bool) -> None:
    """The node's name -> its address, for the API server's kubelet connections (a line
    of its own mark, which host.add_hosts_entry leaves alone)."""
    text = host.HOSTS.read_text()
    kept = [ln for ln in text.splitlines(keepends=True) if HOSTS_MARK not in ln]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    new = "".join(kept + ([f"{NODE_IP} {NAME} {HOSTS_MARK}\n"] if add else []))
    if new != text:
        replace_system_file(host.HOSTS, new)


# --- boot and stop --------------------------------------------------------------------------


def nspawn_argv(node: SystemdNode) -> list[str]:
    argv = [
        "systemd-nspawn",
        "--boot",
        f"--directory={node.rootfs}",
        f"--machine={NAME}",
        f"--hostname={NAME}",
        # No systemd on this machine: no machined to register with, no unit to make.
        "--register=no",
        "--keep-unit",
        "--console=pipe",
        f"--network-namespace-path=/run/netns/{NETNS}",
        # containerd and runc mount, create namespaces and cgroups: a node's root.
        "--capability=all",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
        # The kubelet's OOM watcher reads the kernel log.
        "--bind-ro=/dev/kmsg",
    ]
    argv += [f"--bind-ro={src}:{dst}" for dst, src in binaries(node.paths).items()]
    return argv


# nspawn mounts /proc/sys, /sys and the cgroup v1 controllers read-only, and filters system
# calls; the kubelet writes sysctls and cgroups and runc needs the calls: like kind's nodes,
# this one is a privileged container.
NSPAWN_ENV = {"SYSTEMD_NSPAWN_API_VFS_WRITABLE": "1", "SYSTEMD_SECCOMP": "0"}


def boot(node: SystemdNode, ports: dict[str, int], say: Say) -> None:
    """Start the API server's forwarder and boot the node; wait for its units, import the
    lab's images into its containerd, wait for sshd."""
    t0 = time.monotonic()
    setup_network()
    if not alive(read_pid(node.pids, "apiserver-proxy"), "socat"):
        argv = (
            "socat",
            f"TCP-LISTEN:{sf.API_PORT},bind={HOST_IP},fork,reuseaddr",
            f"TCP:127.0.0.1:{ports['apiserver']}",
        )
        start("apiserver-proxy", argv, node.logs / "apiserver-proxy.log", node.pids)
    if init_pid(node) is None:
        host.make_cgroup_root(CGROUP)
        _start_nspawn(node)
    init = wait_until(f"{NAME} init", lambda: init_pid(node) is not None, 30.0, log=_log(node))
    del init
    wait_until(
        f"{NAME} units {', '.join(UNITS)}",
        lambda: all(s == "active" for s in unit_states(node).values()),
        BOOT_TIMEOUT_S,
        still_running=lambda: init_pid(node) is not None,
        log=_log(node),
    )
    _import_images(node)
    wait_until(f"{NAME} sshd", lambda: _ssh_banner(), 30.0)
    say(f"  {NAME} booted (init pid {init_pid(node)}) in {time.monotonic() - t0:.1f} s")


def _log(node: SystemdNode) -> Path:
    return node.logs / "nspawn.log"


def _start_nspawn(node: SystemdNode) -> None:
    def join_cgroup() -> None:
        # Everything the container makes (its systemd's slices, the kubelet's kubepods)
        # lands below the node's own cgroup, which `down` removes.
        for hierarchy in host.CGROUP_ROOT.iterdir():
            procs = hierarchy / CGROUP / "cgroup.procs"
            if procs.exists():
                with contextlib.suppress(OSError):
                    procs.write_text("0\n")

    log = _log(node)
    with log.open("ab") as out:
        out.write(f"\n--- abtest lab: booting {NAME} at {time.ctime()} ---\n".encode())
        out.flush()
        proc = subprocess.Popen(
            nspawn_argv(node),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **NSPAWN_ENV},
            preexec_fn=join_cgroup,
        )
    (node.pids / "nspawn.pid").write_text(f"{proc.pid}\n")
    (node.pids / "init.pid").unlink(missing_ok=True)


def nspawn_pid(node: SystemdNode) -> int | None:
    pid = read_pid(node.pids, "nspawn")
    return pid if alive(pid, "systemd-nspawn") else None


def init_pid(node: SystemdNode) -> int | None:
    """The container's PID 1 as this machine sees it: recorded once found (nspawn's child
    that is pid 1 of its own pid namespace), checked by its namespace on every read."""
    pid = read_pid(node.pids, "init")
    if pid is not None and _is_container_init(pid):
        return pid
    parent = nspawn_pid(node)
    if parent is None:
        return None
    for child in _children(parent):
        for grandchild in [child, *_children(child)]:
            if _is_container_init(grandchild):
                (node.pids / "init.pid").write_text(f"{grandchild}\n")
                return grandchild
    return None


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _is_container_init(pid: int) -> bool:
    """Pid 1 in its own pid namespace, running systemd (a reused pid is not ours)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    nspid = fields.get("NSpid", "").split()
    state = fields.get("State", "").strip()
    return (
        len(nspid) >= 2 and nspid[-1] == "1" and not state.startswith("Z") and alive(pid, "systemd")
    )


def in_node(
    node: SystemdNode, argv: list[str], timeout: float = 15.0
) -> subprocess.CompletedProcess[str]:
    """Run `argv` in the node (its namespaces, its files) from this machine."""
    pid = init_pid(node)
    if pid is None:
        raise LabError(f"{NAME} is not running")
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def unit_states(node: SystemdNode) -> dict[str, str]:
    """Each unit's ActiveState as the node's systemd reports it ("-" when it cannot say)."""
    try:
        proc = in_node(node, ["systemctl", "is-active", *UNITS])
    except (LabError, subprocess.TimeoutExpired, OSError):
        return {u: "-" for u in UNITS}
    states = proc.stdout.split()
    return {u: states[i] if i < len(states) else "-" for i, u in enumerate(UNITS)}


def _import_images(node: SystemdNode) -> None:
    pid = init_pid(node)
    socket_path = Path(f"/proc/{pid}/root") / sf.CONTAINERD_SOCKET.lstrip("/")
    images.import_archives(node.paths, socket_path)


def _ssh_banner() -> bool:
    with socket.create_connection((NODE_IP, 22), timeout=2) as s:
        return s.recv(4).startswith(b"SSH-")


def stop_node(node: SystemdNode, say: Say) -> list[str]:
    """Power the node off by its init's pid (SIGKILL if it does not go: that ends its whole
    pid namespace), then nspawn and the forwarder; returns what would not stop."""
    problems: list[str] = []
    init, parent = init_pid(node), nspawn_pid(node)

    def nspawn_left() -> bool:
        return parent is not None and alive(parent, "systemd-nspawn")

    if init is not None:
        # Each liveness check is by what the pid must be: a pid reused meanwhile is not ours.
        with contextlib.suppress(ProcessLookupError):
            os.kill(init, SIGRTMIN_POWEROFF)
        if not _gone(lambda: _is_container_init(init), POWEROFF_WAIT_S, parent):
            say(f"  {NAME}: init {init} did not power off in {POWEROFF_WAIT_S:.0f} s; SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
            if not _gone(lambda: _is_container_init(init), KILL_WAIT_S):
                problems.append(f"{NAME}: init pid {init} still running after SIGKILL")
    if parent is not None and not _gone(nspawn_left, KILL_WAIT_S, parent):
        with contextlib.suppress(ProcessLookupError):
            os.kill(parent, signal.SIGKILL)
        if not _gone(nspawn_left, KILL_WAIT_S, parent):
            problems.append(f"{NAME}: systemd-nspawn pid {parent} still running after SIGKILL")
    if not problems:
        for name in ("init", "nspawn"):
            (node.pids / f"{name}.pid").unlink(missing_ok=True)
        if init is not None or parent is not None:
            say(f"  stopped {NAME} (init pid {init}, nspawn pid {parent})")
    try:
        stop("apiserver-proxy", node.pids, "socat")
    except LabError as exc:
        problems.append(str(exc))
    return problems


def _gone(present: Callable[[], bool], wait: float, child: int | None = None) -> bool:
    """Waits up to `wait` s for `present()` to turn false; reaps `child` if it is ours
    (nspawn, when this process booted the node)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if child is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, os.WNOHANG)
        if not present():
            return True
        time.sleep(0.1)
    return not present()


def remove_leftovers(node: SystemdNode) -> None:
    """After stop_node: the node's network, cgroups and run directory."""
    teardown_network()
    host.remove_kubepods_cgroups((CGROUP,))
    if node.run.exists():
        shutil.rmtree(node.run, ignore_errors=True)


# --- within `lab up` / `lab status` / `lab down` ----------------------------------------------


@dataclass(frozen=True)
class SystemdNodeStatus:
    name: str
    profile: str
    init_pid: int | None
    nspawn_pid: int | None
    units: dict[str, str]
    ready: bool
    kubelet_version: str | None = None

    @property
    def up(self) -> bool:
        return self.init_pid is not None

    @property
    def healthy(self) -> bool:
        return self.up and all(s == "active" for s in self.units.values())

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "up": self.up, "healthy": self.healthy}


def node_status(paths: Paths, ports: dict[str, int], api_ok: bool) -> SystemdNodeStatus:
    node = SystemdNode(paths)
    init = init_pid(node)
    units = unit_states(node) if init is not None else {u: "-" for u in UNITS}
    ready, version = False, None
    if api_ok and ports:
        try:
            ready, version = components.node_readiness(paths, ports, NAME)
        except (OSError, ValueError):
            ready = False
    return SystemdNodeStatus(NAME, str(node.profile), init, nspawn_pid(node), units, ready, version)


def bring_up(paths: Paths, ports: dict[str, int], say: Say) -> None:
    """Prepare, boot and wait for Ready (a healthy running node is left as it is)."""
    node = SystemdNode(paths)
    current = node_status(paths, ports, True)
    if current.healthy and current.ready:
        return
    if current.up:
        say(f"  {NAME} is not healthy ({current.units}); restarting it")
        _raise(stop_node(node, say))
    prepare(node, ports, pki.ensure_ca(paths.pki), say)
    boot(node, ports, say)
    t0 = time.monotonic()
    wait_until(
        f"node {NAME} Ready",
        lambda: components.node_ready(paths, ports, NAME),
        READY_TIMEOUT_S,
        still_running=lambda: init_pid(node) is not None,
    )
    say(f"  {NAME} Ready {time.monotonic() - t0:.1f} s after its boot")


def take_down(paths: Paths, ports: dict[str, int] | None, say: Say, forget: bool) -> list[str]:
    """Stop the node and remove what it added to this machine; `forget`: it is not wanted
    any more, so its Node object goes too (its state directory stays until --purge)."""
    node = SystemdNode(paths)
    problems = stop_node(node, say)
    if problems:
        return problems
    remove_leftovers(node)
    if forget and ports:
        try:
            components.api_call(paths, ports, f"/api/v1/nodes/{NAME}", "DELETE")
            say(f"  deleted Node {NAME}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                problems.append(f"Node {NAME}: delete failed: HTTP {exc.code}")
        except OSError as exc:
            problems.append(f"Node {NAME}: delete failed: {exc}")
    return problems


def reconcile(paths: Paths, want: bool, say: Say) -> None:
    """On a running lab: start the systemd node, or take it away, as `want` says."""
    state = LabState.load(paths) or LabState()
    if want:
        state.systemd_node = True
        state.save(paths)
        try:
            bring_up(paths, state.ports, say)
        except BaseException:
            say("starting the systemd node failed; taking it down")
            for line in take_down(paths, state.ports, say, forget=True):
                say(f"  (and taking it down: {line})")
            state.systemd_node = False
            state.save(paths)
            raise
        say(f"  {NAME}: --profile {SystemdNode(paths).profile}")
    elif state.systemd_node:
        _raise(take_down(paths, state.ports, say, forget=True))
        state.systemd_node = False
        state.save(paths)


def _raise(problems: list[str]) -> None:
    if problems:
        raise LabError("; ".join(problems))


def left_behind(paths: Paths) -> list[str]:
    """What of the systemd node `down` should have removed and is still here."""
    node = SystemdNode(paths)
    out: list[str] = []
    for name, pid in (("init", read_pid(node.pids, "init")), ("nspawn", nspawn_pid(node))):
        if pid is not None and alive(pid) and (name == "nspawn" or _is_container_init(pid)):
            out.append(f"process: {NAME} {name} (pid {pid}) is running")
    proxy = read_pid(node.pids, "apiserver-proxy")
    if alive(proxy, "socat"):
        out.append(f"process: {NAME} apiserver-proxy (pid {proxy}) is running")
    if Path(f"/run/netns/{NETNS}").exists():
        out.append(f"netns: {NETNS}")
    if Path(f"/sys/class/net/{VETH_HOST}").exists():
        out.append(f"network link: {VETH_HOST}")
    if host.HOSTS.exists() and HOSTS_MARK in host.HOSTS.read_text():
        out.append(f"/etc/hosts: the line of {NAME}")
    if host.CGROUP_ROOT.is_dir():
        for hierarchy in sorted(host.CGROUP_ROOT.iterdir()):
            if (hierarchy / CGROUP).is_dir():
                out.append(f"cgroup: {hierarchy / CGROUP}")
    return out
