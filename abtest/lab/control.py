"""`abtest lab up | status | down`: bring the real single-node cluster up and down."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abtest.errors import LabError
from abtest.lab import components, host, images, layout, pki, sshd
from abtest.lab.binaries import binary_set, ensure_binaries
from abtest.lab.layout import LabState, Paths
from abtest.lab.processes import alive, free_port, read_pid, start, stop, wait_until

Say = Callable[[str], None]
PREFERRED_PORTS = {
    "etcd": 2379,
    "etcd_peer": 2380,
    "apiserver": 6443,
    "controller_manager": 10257,
    "scheduler": 10259,
    "kubelet": 10250,
    "kubelet_healthz": 10248,
    "sshd": 2222,
}
START_TIMEOUT = {"kube-apiserver": 120.0, "kubelet": 120.0}


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    healthy: bool


@dataclass(frozen=True)
class LabStatus:
    up: bool
    ready: bool
    node: str
    kubeconfig: str
    ssh_target: str
    components: tuple[ComponentStatus, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "up": self.up,
            "ready": self.ready,
            "node": self.node,
            "kubeconfig": self.kubeconfig,
            "ssh_target": self.ssh_target,
            "components": {
                c.name: {"pid": c.pid, "running": c.running, "healthy": c.healthy}
                for c in self.components
            },
        }


def status(paths: Paths | None = None) -> LabStatus:
    paths = paths or Paths()
    state = LabState.load(paths)
    ports = state.ports if state else {}
    comps = []
    for name in components.ORDER:
        pid = read_pid(paths.pids, name)
        running = alive(pid, components.EXPECT[name])
        ok = running and bool(ports) and components.healthy(name, paths, ports)
        comps.append(ComponentStatus(name, pid if running else None, running, ok))
    ready = False
    if ports and all(c.healthy for c in comps if c.name == "kube-apiserver"):
        try:
            ready = components.node_ready(paths, ports)
        except (OSError, ValueError):
            ready = False
    ssh = f"{layout.SSH_USER}@127.0.0.1:{ports['sshd']}" if "sshd" in ports else ""
    return LabStatus(
        up=all(c.running for c in comps),
        ready=ready,
        node=layout.NODE_NAME,
        kubeconfig=str(paths.kubeconfig),
        ssh_target=ssh,
        components=tuple(comps),
    )


def up(say: Say = print, paths: Paths | None = None) -> LabStatus:
    paths = paths or Paths()
    host.require_root()
    current = status(paths)
    if current.up and current.ready and all(c.healthy for c in current.components):
        say("lab is already up; nothing changed")
        return current
    if any(c.running for c in current.components):
        say("lab is partly up; bringing the rest down first")
        down(say=say, paths=paths)
    host.ensure_packages(say)
    t0 = time.monotonic()
    bins = ensure_binaries(say)
    build_s = time.monotonic() - t0
    if build_s > 1:
        say(f"binaries ready in {build_s:.0f} s")
    fresh = not paths.state_file.exists()
    for d in paths.all_dirs():
        d.mkdir(parents=True, exist_ok=True)
    for name in bins.names:
        _install_binary(bins.path(name), paths.bin / name)

    state = LabState.load(paths) or LabState()
    taken: set[int] = set()
    ports: dict[str, int] = {}
    for key, preferred in PREFERRED_PORTS.items():
        ports[key] = free_port(state.ports.get(key) or preferred, taken)
        taken.add(ports[key])
    state.ports = ports
    state.mounted_cgroups = sorted(set(state.mounted_cgroups) | set(host.mount_cgroups()))
    if state.ip_forward_before is None:
        state.ip_forward_before = host.set_ip_forward()
    else:
        host.set_ip_forward()
    state.save(paths)
    try:
        _prepare(paths, ports, fresh)
        for name in components.ORDER:
            _start_component(name, paths, ports, say)
            if name == "containerd":
                images.import_images(paths)
                say("  images imported: " + ", ".join((layout.BUSYBOX_IMAGE, layout.PAUSE_IMAGE)))
            if name == "kube-apiserver":
                _apply_rbac(paths)
        wait_until("node Ready", lambda: components.node_ready(paths, ports), 120.0)
    except BaseException:
        say("lab up failed; stopping everything it started")
        down(say=say, paths=paths)
        raise
    say(f"lab is up: node {layout.NODE_NAME} Ready")
    say(f"export KUBECONFIG={paths.kubeconfig}")
    return status(paths)


def _install_binary(src: Path, dst: Path) -> None:
    if dst.exists() and (dst.stat().st_size, dst.stat().st_mtime) == (
        src.stat().st_size,
        src.stat().st_mtime,
    ):
        return
    tmp = dst.with_suffix(".tmp")
    shutil.copy2(src, tmp)
    tmp.replace(dst)


def _prepare(paths: Paths, ports: dict[str, int], fresh: bool) -> None:
    ca = pki.ensure_ca(paths.pki)
    d = paths.pki
    pki.issue(
        ca,
        d,
        "apiserver",
        "kube-apiserver",
        server=True,
        dns=("kubernetes", "kubernetes.default", "localhost"),
        ips=("127.0.0.1", "10.253.0.1"),
    )
    pki.issue(
        ca,
        d,
        "apiserver-kubelet-client",
        "kube-apiserver-kubelet-client",
        org="system:masters",
        client=True,
    )
    pki.issue(ca, d, "admin", "abtest-admin", org="system:masters", client=True)
    pki.issue(ca, d, "scheduler", "system:kube-scheduler", client=True)
    pki.issue(ca, d, "controller-manager", "system:kube-controller-manager", client=True)
    pki.issue(ca, d, "kubelet", f"system:node:{layout.NODE_NAME}", org="system:nodes", client=True)
    pki.issue(
        ca,
        d,
        "kubelet-serving",
        f"system:node:{layout.NODE_NAME}",
        server=True,
        dns=(layout.NODE_NAME, "localhost"),
        ips=("127.0.0.1", layout.NODE_PROXY_IP),
    )
    pki.ensure_service_account_key(d)
    server = f"https://127.0.0.1:{ports['apiserver']}"
    for user, cert in (
        ("admin", "admin"),
        ("scheduler", "scheduler"),
        ("controller-manager", "controller-manager"),
        ("kubelet", "kubelet"),
    ):
        pki.write_kubeconfig(
            paths.root / f"{user}.kubeconfig",
            server,
            ca,
            pki.CertPair(d / f"{cert}.crt", d / f"{cert}.key"),
            user,
        )
    host.write_cni_config(paths)
    host.write_containerd_config(paths)
    host.setup_node_proxy_netns()
    components.write_kubelet_files(paths, ports, fresh)
    sshd.ensure_user(paths)
    sshd.ensure_keys(paths)
    sshd.write_configs(paths, ports["sshd"])


def _start_component(name: str, paths: Paths, ports: dict[str, int], say: Say) -> None:
    log = paths.logs / f"{name}.log"
    t0 = time.monotonic()
    if name == "kubelet":
        subprocess.run([str(paths.bin / "kubelet-service"), "start"], check=True)
    else:
        spec = components.argv_for(name, paths, ports)
        start(name, spec.argv, log, paths.pids, netns=spec.netns)
    wait_until(
        name,
        lambda: components.healthy(name, paths, ports),
        START_TIMEOUT.get(name, 60.0),
        # No cmdline check here: right after fork the child may not have exec'd yet.
        still_running=lambda: alive(read_pid(paths.pids, name)),
        log=log,
    )
    say(f"  {name} healthy in {time.monotonic() - t0:.1f} s")


def _apply_rbac(paths: Paths) -> None:
    """Let the API server's kubelet client reach the kubelet API (configz, metrics, logs)."""
    # The kubelet-client cert is in system:masters, which needs no binding: nothing to do.
    del paths


def down(say: Say = print, paths: Paths | None = None, purge: bool = False) -> None:
    paths = paths or Paths()
    host.require_root()
    state = LabState.load(paths)
    kubelet_service = paths.bin / "kubelet-service"
    if kubelet_service.exists():
        subprocess.run([str(kubelet_service), "stop"], capture_output=True)
    _remove_sandboxes(paths, say)
    for name in reversed(components.ORDER):
        if name != "kubelet" and stop(name, paths.pids, components.EXPECT[name]):
            say(f"  stopped {name}")
    host.unmount_under([paths.root, paths.run])
    host.remove_kubepods_cgroups()
    host.teardown_networking()
    if state is not None:
        host.restore_ip_forward(state.ip_forward_before)
        state.ip_forward_before = None
        if paths.state_file.exists():
            state.save(paths)
    if purge:
        sshd.remove_sudoers()
        shutil.rmtree(paths.root, ignore_errors=True)
        shutil.rmtree(paths.run, ignore_errors=True)
        say(f"purged {paths.root} (binary cache kept at {binary_set().directory})")
    say("lab is down")


def _remove_sandboxes(paths: Paths, say: Say) -> None:
    crictl = paths.bin / "crictl"
    if not (crictl.exists() and alive(read_pid(paths.pids, "containerd"), "containerd")):
        return
    base = [
        str(crictl),
        "--runtime-endpoint",
        f"unix://{paths.containerd_socket}",
        "--timeout",
        "30s",
    ]
    ids = subprocess.run([*base, "pods", "-q"], capture_output=True, text=True).stdout.split()
    for pod_id in ids:
        subprocess.run([*base, "stopp", pod_id], capture_output=True)
        subprocess.run([*base, "rmp", "-f", pod_id], capture_output=True)
    if ids:
        say(f"  removed {len(ids)} pod sandboxes")


def restart_component(name: str, say: Say = print, paths: Paths | None = None) -> None:
    """Stop one lab process (by its pid) and start it again with the same flags; used by
    tests that need a fresh API server (e.g. a watch cache that starts at the current
    revision)."""
    paths = paths or Paths()
    state = LabState.load(paths)
    if state is None or name not in components.ORDER or name == "kubelet":
        raise LabError(f"cannot restart {name!r} (the kubelet restarts through its profile)")
    stop(name, paths.pids, components.EXPECT[name])
    _start_component(name, paths, state.ports, say)


def require_up(paths: Paths | None = None) -> LabStatus:
    st = status(paths)
    if not (st.up and st.ready):
        raise LabError("the lab is not up (run `abtest lab up`)")
    return st
