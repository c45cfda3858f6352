"""`abtest lab up [--nodes N] | status | down`: bring the real cluster up and down.

One control plane (etcd, API server, scheduler, controller-manager) and one sshd; node 1
(the single-node lab's layout) plus nodes 2..N from nodes.py. `up --nodes M` on a running
lab adds or removes nodes without touching the control plane or the nodes it keeps.

The control plane's certificates and start-up are control_plane.py, `status` status.py, the
release an `up` runs releases.py, extra kubelet releases kubelet_builds.py."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from abtest.config.api_faults import ApiFaults
from abtest.config.api_latency import ApiLatency
from abtest.config.domain import Release
from abtest.errors import LabError, UserError
from abtest.lab import (
    api_proxy,
    components,
    control_plane,
    host,
    images,
    kubelet_files,
    layout,
    pki,
    residue,
    runtimes,
    sdnode,
    sdnode_run,
    shims,
    sshd,
)
from abtest.lab import nodes as lab_nodes
from abtest.lab.binaries import CONTAINERD_VERSION, binary_set, ensure_binaries
from abtest.lab.files import install_binary, make_dir
from abtest.lab.layout import LabState, Node, Paths, Say
from abtest.lab.nodes import NodeStatus
from abtest.lab.processes import free_port, wait_until
from abtest.lab.releases import choose_release, served
from abtest.lab.status import LabStatus, status

PREFERRED_PORTS = {
    "etcd": 2379,
    "etcd_peer": 2380,
    "apiserver": 6443,
    "controller_manager": 10257,
    "scheduler": 10259,
    # the kubelets' way to the API server (api_proxy.py) and the proxy's admin API
    "api_proxy": 6444,
    "api_proxy_admin": 8474,
    "kubelet": 10250,
    "kubelet_healthz": 10248,
    "sshd": 2222,
}


READY_TIMEOUT_S = 120.0


def up(
    say: Say = print,
    paths: Paths | None = None,
    nodes: int = 1,
    kubernetes: Release | None = None,
    systemd_node: bool = False,
    api_latency: ApiLatency | None = None,
    api_faults: ApiFaults | None = None,
) -> LabStatus:
    """Bring the lab up with `nodes` nodes at release `kubernetes` (None: the kept lab's, or
    the default), and the systemd node if asked (sdnode.py); on a healthy lab at that
    release, only add or remove nodes (and the systemd node). `api_latency` (None: the kept
    lab's, else 0) is the delay on the kubelets' way to the API server, `api_faults` (the same)
    the connection cuts on it: on a running lab, changing either only re-sets the proxy's
    toxics (api_proxy.py)."""
    lab_nodes.check_count(nodes)
    paths = paths or Paths()
    host.require_root()
    current = status(paths)
    release = choose_release(paths, kubernetes, any(c.running for c in current.components), say)
    if binary_set(release).missing():
        problem = served(release)
        if problem:
            raise UserError(problem, "--kubernetes", "choose a release the proxy serves")
    if _keeps_running(current, nodes, systemd_node):
        changes = (api_latency is not None and api_latency != api_proxy.stored(paths)) or (
            api_faults is not None and api_faults != api_proxy.stored_faults(paths)
        )
        _say_notes(current, say, None if changes else "lab is already up; nothing changed")
        _change_path(paths, api_latency, api_faults, say)
        return status(paths)
    if _control_plane_ok(current):
        _say_notes(current, say, None)
        _resize(paths, nodes, say)
        sdnode_run.reconcile(paths, systemd_node, say)
        _change_path(paths, api_latency, api_faults, say)
        return status(paths)
    if any(c.running for c in current.components) or any(n.up for n in current.nodes[1:]):
        say("lab is partly up; bringing the rest down first")
        down(say=say, paths=paths)
    fresh, state = _install(paths, release, say)
    if api_latency is not None:
        state.api_latency_ms, state.api_jitter_ms = api_latency.ms, api_latency.jitter_ms
    if api_faults is not None:
        state.api_faults_kib = api_faults.kib
    want = _prepare_state(paths, state, fresh, nodes, systemd_node, say)
    try:
        _start_all(paths, state.ports, fresh, want, systemd_node, say)
    except BaseException:
        say("lab up failed; stopping everything it started")
        try:
            down(say=say, paths=paths)
        except LabError as exc:
            # Said, not hidden; the error worth raising is why `up` failed.
            say(f"  (and lab down after it: {exc})")
        raise
    _say_up(want, paths, say)
    return status(paths)


def _change_path(
    paths: Paths, latency: ApiLatency | None, faults: ApiFaults | None, say: Say
) -> None:
    """On a running lab: the new settings in the state, then in the proxy; nothing restarts
    (every kubelet's kubeconfig names the proxy whatever the setting)."""
    if latency is None and faults is None:
        return
    api_proxy.record(paths, latency, faults)
    state = LabState.load(paths) or LabState()
    api_proxy.apply_stored(paths, state.ports, say)


def _keeps_running(current: LabStatus, nodes: int, systemd_node: bool) -> bool:
    """The lab is up as asked: every component and node healthy, the systemd node as asked."""
    sd = current.systemd_node
    sd_ok = (sd is not None and sd.healthy and sd.ready) if systemd_node else sd is None
    return (
        _healthy(current)
        and len(current.nodes) == nodes
        and all(all(n.healthy.values()) for n in current.nodes)
        and sd_ok
    )


def _control_plane_ok(current: LabStatus) -> bool:
    """The control plane and node 1 are healthy: `up` only adds or removes nodes."""
    one = current.nodes[0]
    control_ok = all(c.healthy for c in current.components)
    return control_ok and one.ready and one.up and all(one.healthy.values())


def _say_notes(current: LabStatus, say: Say, first: str | None) -> None:
    if first is not None:
        say(first)
    for note in containerd_notes(current.nodes):
        say("  note: " + note)


def _install(paths: Paths, release: Release, say: Say) -> tuple[bool, LabState]:
    """The host's packages, the release's binaries in the lab's bin directory, and the lab's
    directories; whether the state directory is fresh, and its state (release, containerd)."""
    host.ensure_packages(say)
    t0 = time.monotonic()
    bins = ensure_binaries(say, release=release)
    build_s = time.monotonic() - t0
    if build_s > 1:
        say(f"binaries ready in {build_s:.0f} s")
    fresh = not paths.state_file.exists()
    for d in paths.all_dirs():
        make_dir(d)
    for name in bins.names:
        install_binary(bins.path(name), paths.bin / name)
    state = LabState.load(paths) or LabState()
    state.kubernetes = release.version
    if not fresh and state.containerd != CONTAINERD_VERSION:
        say(
            f"moving the kept lab from containerd {state.containerd or '1.6 (Debian)'} to "
            f"{CONTAINERD_VERSION}: its images and metadata in each node's containerd "
            "directory are kept (containerd 1.7 reads 1.6's); `abtest lab down --purge` "
            "first for a fresh lab"
        )
    state.containerd = CONTAINERD_VERSION
    return fresh, state


def _prepare_state(
    paths: Paths, state: LabState, fresh: bool, nodes: int, systemd_node: bool, say: Say
) -> list[Node]:
    """Ports, nodes, cgroup mounts and ip_forward, recorded in the state file before anything
    starts (so `down` can undo them); the nodes to start."""
    # Nodes an earlier, larger lab left on disk (down keeps them): gone for good now.
    for extra in lab_nodes.present(paths, nodes)[nodes:]:
        _raise_problems(lab_nodes.remove_node(extra, None, say))
    want = layout.nodes(nodes, paths)
    taken: set[int] = set()
    ports: dict[str, int] = {}
    for key, preferred in PREFERRED_PORTS.items():
        if key in lab_nodes.PREFERRED_NODE_PORTS:
            continue  # per node, below
        ports[key] = free_port(state.ports.get(key) or preferred, taken)
        taken.add(ports[key])
    _node_ports(want, state.ports, ports, taken)
    state.ports = ports
    state.nodes = nodes
    state.systemd_node = systemd_node
    mounted, made = host.mount_cgroups()
    state.mounted_cgroups = sorted(set(state.mounted_cgroups) | set(mounted))
    state.cgroup_dirs_made = sorted(set(state.cgroup_dirs_made) | set(made))
    # Remember the value from before the first `up` only: an `up` after a failed `down`
    # must not record the lab's own "1" as the host's.
    before = host.set_ip_forward()
    if state.ip_forward_before is None:
        state.ip_forward_before = before
    state.save(paths)
    return want


def _start_all(
    paths: Paths,
    ports: dict[str, int],
    fresh: bool,
    want: list[Node],
    systemd_node: bool,
    say: Say,
) -> None:
    """Certificates and files, then every component in ORDER on node 1, the other nodes, and
    the systemd node if asked; returns when every node is Ready."""
    control_plane.prepare(paths, ports, fresh, want)
    for node in want:
        for note in kubelet_files.kept_config_notes(node):
            say("  note: " + note)
    first = Node(1, paths)
    for comp in components.COMPONENTS:
        comp.start(first, ports, say)
        _after_start(comp.name, paths, ports, len(want), systemd_node, say)
    for node in want[1:]:
        lab_nodes.start_node(node, ports, say)
    _wait_ready(want, ports)
    if systemd_node:
        sdnode_run.bring_up(paths, ports, say)


def _after_start(
    name: str, paths: Paths, ports: dict[str, int], nodes: int, systemd_node: bool, say: Say
) -> None:
    """What the lab's bring-up does once a component is healthy (what it needs of the
    lab as a whole, not of the component: the cluster's objects, the images)."""
    if name == "etcd":
        control_plane.advertise_etcd_peer(paths, ports, say)
    if name == "api-proxy":
        api_proxy.apply_stored(paths, ports, say)
    if name == "containerd":
        images.import_images(paths)
        say("  images imported: " + ", ".join((layout.BUSYBOX_IMAGE, layout.PAUSE_IMAGE)))
    if name == "kube-apiserver":
        control_plane.apply_rbac(paths)
        _delete_stale_node_objects(paths, ports, nodes, say)
        if not systemd_node:  # one an earlier `up --systemd-node` registered
            _raise_problems(lab_nodes.delete_node_object(paths, ports, sdnode.NAME, say))
        runtimes.ensure_runtime_classes(paths, ports, say)


def containerd_notes(nodes: tuple[NodeStatus, ...]) -> list[str]:
    """A running node whose containerd is not the lab's build (a lab started by an older
    abtest runs Debian's 1.6): `up` on a running lab changes nothing, so it says how to move."""
    return [
        f"{n.name} runs containerd {n.containerd_version}, not the lab's {CONTAINERD_VERSION} "
        "(started by an older abtest): `abtest lab down && abtest lab up` moves it (the "
        "state directory is kept)"
        for n in nodes
        if n.containerd_version is not None and n.containerd_version != CONTAINERD_VERSION
    ]


def _say_up(want: list[Node], paths: Paths, say: Say) -> None:
    names = ", ".join(n.name for n in want)
    say(f"lab is up: node{'s' if len(want) > 1 else ''} {names} Ready")
    for node in want[1:]:
        say(f"  {node.name}: --profile {node.profile}")
    say(f"export KUBECONFIG={paths.kubeconfig}")


def _node_ports(
    want: list[Node], old: dict[str, int], ports: dict[str, int], taken: set[int]
) -> None:
    """Each node's kubelet and healthz ports: what it had, if still free, else new ones."""
    for node in want:
        for kind in lab_nodes.PREFERRED_NODE_PORTS:
            key = node.port_key(kind)
            ports[key] = free_port(old.get(key) or lab_nodes.preferred_port(node, kind), taken)
            taken.add(ports[key])


def _wait_ready(want: list[Node], ports: dict[str, int]) -> None:
    for node in want:
        wait_until(
            f"node {node.name} Ready",
            lambda node=node: components.node_ready(node.paths, ports, node.name),  # type: ignore[misc]
            READY_TIMEOUT_S,
            log=node.logs / "kubelet.log",
        )


def _delete_stale_node_objects(paths: Paths, ports: dict[str, int], count: int, say: Say) -> None:
    for name in lab_nodes.stale_node_objects(paths, ports, count):
        _raise_problems(lab_nodes.delete_node_object(paths, ports, name, say))


def _raise_problems(problems: list[str]) -> None:
    if problems:
        raise LabError("; ".join(problems))


def _resize(paths: Paths, count: int, say: Say) -> None:
    """On a running lab: remove nodes above `count`, start the missing ones. The control
    plane, the sshd and every node that stays are not touched."""
    state = LabState.load(paths) or LabState()
    have = state.nodes
    for extra in reversed(lab_nodes.present(paths, max(have, count))[count:]):
        _raise_problems(lab_nodes.remove_node(extra, state.ports, say))
        for kind in lab_nodes.PREFERRED_NODE_PORTS:
            state.ports.pop(extra.port_key(kind), None)
        state.nodes = min(state.nodes, extra.index - 1)
        state.save(paths)
    _delete_stale_node_objects(paths, state.ports, count, say)
    want = layout.nodes(count, paths)
    fine = {n.name for n in status(paths).nodes if n.up and all(n.healthy.values())}
    added = [n for n in want[1:] if n.name not in fine]
    # A node that has ports already keeps them: its kubelet config (kept) names them.
    new = [n for n in added if n.port_key("kubelet") not in state.ports]
    ports = dict(state.ports)
    _node_ports(new, state.ports, ports, set(ports.values()))
    state.ports = ports
    state.nodes = count
    state.save(paths)
    host.add_hosts_entry(nodes=want)
    ca = pki.ensure_ca(paths.pki)
    try:
        for node in added:
            lab_nodes.prepare(node, ports, not node.kubelet_config.exists(), ca)
            lab_nodes.start_node(node, ports, say)
        _wait_ready(want, ports)
    except BaseException:
        say("adding nodes failed; removing the nodes it added")
        for node in reversed(added):
            for line in lab_nodes.remove_node(node, ports, say):
                say(f"  (and removing {node.name}: {line})")
        state.nodes = min([n.index for n in added] + [count + 1]) - 1
        state.save(paths)
        host.add_hosts_entry(nodes=layout.nodes(state.nodes, paths))
        raise
    _say_up(want, paths, say)


def _healthy(st: LabStatus) -> bool:
    return st.up and st.ready and all(c.healthy for c in st.components)


def down(say: Say = print, paths: Paths | None = None, purge: bool = False) -> None:
    """Stop what `up` started and put back what it changed on the host.

    Without --purge the state directory stays (certificates, etcd data, kubelet config, SSH
    keys: the next `up` takes seconds and the cluster keeps its objects); everything else
    `up` added goes: processes, mounts, cgroup mounts, network devices, the /etc/hosts
    line, ip_forward's old value, the SSH user and its sudoers file, the run directory.
    Whatever could not be undone is listed and makes this fail (LabError)."""
    paths = paths or Paths()
    host.require_root()
    state = LabState.load(paths)
    problems: list[str] = []
    every = lab_nodes.present(paths, state.nodes if state else 1)
    problems += sdnode_run.take_down(paths, None, say, forget=False)
    for node in reversed(every[1:]):
        problems += lab_nodes.stop_node(node, say)
    kubelet_service = paths.bin / "kubelet-service"
    if kubelet_service.exists():
        proc = subprocess.run([str(kubelet_service), "stop"], capture_output=True, text=True)
        if proc.returncode != 0:
            problems.append(f"kubelet: `kubelet-service stop` failed: {proc.stderr.strip()}")
    lab_nodes.remove_sandboxes(Node(1, paths), say)
    first = Node(1, paths)
    for comp in reversed(components.COMPONENTS):
        if comp.name == "kubelet":
            continue  # stopped above, by its script
        try:
            if comp.stop(first):
                say(f"  stopped {comp.name}")
        except LabError as exc:
            problems.append(str(exc))
    problems += shims.stop_orphaned_shims(paths, say)
    host.unmount_under([paths.root, paths.run])
    host.remove_kubepods_cgroups(("kubepods", *(n.cgroup_root for n in every[1:] if n.cgroup_root)))
    host.teardown_networking(every)
    host.remove_hosts_entry()
    problems += sshd.close_door(paths)
    if state is not None:
        problems += host.unmount_cgroups(state.mounted_cgroups, state.cgroup_dirs_made)
        state.mounted_cgroups = [
            n for n in state.mounted_cgroups if host.is_mount_point(host.CGROUP_ROOT / n)
        ]
        state.cgroup_dirs_made = [
            n for n in state.cgroup_dirs_made if (host.CGROUP_ROOT / n).exists()
        ]
        host.restore_ip_forward(state.ip_forward_before)
        state.ip_forward_before = None
        if paths.state_file.exists():
            state.save(paths)
    running = residue.lab_processes(paths)
    if running:
        # Their pid files and sockets are what `status` and the next `down` need.
        problems.append(f"processes still running, {paths.run} kept: {running}")
    else:
        _remove_tree(paths.run, problems)
        if purge:
            _remove_tree(paths.root, problems)
            if not problems:
                say(f"purged {paths.root} (binary cache kept in {binary_set().directory.parent})")
    left = residue.left_behind(paths, None if purge else LabState.load(paths))
    problems += [p for p in left if p not in problems]
    if problems:
        for line in problems:
            say(f"  left behind: {line}")
        raise LabError(
            f"lab down could not undo {len(problems)} thing(s) (listed above; "
            "`abtest lab status` lists them too)"
        )
    say("lab is down")


def _remove_tree(path: Path, problems: list[str]) -> None:
    def note(_func: object, failed: str, exc_info: tuple[type, BaseException, object]) -> None:
        problems.append(f"{failed}: cannot remove ({exc_info[1]})")

    if path.exists():
        shutil.rmtree(path, onerror=note)


def restart_component(name: str, say: Say = print, paths: Paths | None = None) -> None:
    """Stop one lab process (by its pid) and start it again with the same flags; used by
    tests that need a fresh API server (e.g. a watch cache that starts at the current
    revision)."""
    paths = paths or Paths()
    state = LabState.load(paths)
    if state is None or name not in components.ORDER or name == "kubelet":
        raise LabError(f"cannot restart {name!r} (the kubelet restarts through its profile)")
    comp, first = components.component(name), Node(1, paths)
    comp.stop(first)
    comp.start(first, state.ports, say)
