"""`abtest lab status`: what of the lab runs and is healthy, node by node, and what a lab
that is not up left behind."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from abtest.errors import LabError
from abtest.lab import components, layout, residue, runtimes, sdnode_run
from abtest.lab import nodes as lab_nodes
from abtest.lab.kubelet_builds import placed_kubelets
from abtest.lab.layout import LabState, Node, Paths
from abtest.lab.nodes import NodeStatus
from abtest.lab.releases import kept_release
from abtest.lab.sdnode_run import SystemdNodeStatus


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
    # Every node, node 1 first (its components are also in `components`, as before).
    nodes: tuple[NodeStatus, ...] = ()
    # Only when the lab is not (fully) up: what `down` should have removed and is still
    # here, and what `down` keeps on purpose (see residue.py).
    left_behind: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    # RuntimeClass objects in the cluster (name -> handler); empty with the reason in
    # runtime_classes_error when the API server could not be asked.
    runtime_classes: dict[str, str] = field(default_factory=dict)
    runtime_classes_error: str | None = None
    #: the release the lab's binaries are (from its state), and what the running API server
    #: reports (None: not running)
    release: str | None = None
    api_server_version: str | None = None
    #: extra kubelet releases placed for kubelet_build arms (`lab kubelets`)
    kubelet_builds: tuple[str, ...] = ()
    #: the systemd node (`up --systemd-node`; None: the lab has none)
    systemd_node: SystemdNodeStatus | None = None
    #: the delay on the kubelets' way to the API server, as the lab's state records it
    #: (`up --api-latency`; api_proxy.py gives it to the proxy at each start and change)
    api_latency_ms: int = 0
    api_jitter_ms: int = 0
    api_faults_kib: int = 0  # `up --api-faults`: the proxy's connection cuts (0: none)

    def as_json(self) -> dict[str, object]:
        """Every field (a new one shows in `lab status --json` by itself); the release as
        ``kubernetes``, the components as one map, each node as its own ``as_json``."""
        nested = ("release", "components", "nodes", "systemd_node")
        fields = {k: v for k, v in asdict(self).items() if k not in nested}
        return {
            **fields,
            "kubernetes": self.release,
            "components": {
                c.name: {"pid": c.pid, "running": c.running, "healthy": c.healthy}
                for c in self.components
            },
            "nodes": [n.as_json() for n in self.nodes],
            "systemd_node": self.systemd_node.as_json() if self.systemd_node else None,
        }


def status(paths: Paths | None = None) -> LabStatus:
    paths = paths or Paths()
    state = LabState.load(paths)
    ports = state.ports if state else {}
    comps = []
    first = Node(1, paths)
    for comp in components.COMPONENTS:
        pid = comp.running(first)
        running = pid is not None
        ok = running and bool(ports) and comp.healthy(paths, ports, first)
        comps.append(ComponentStatus(comp.name, pid, running, ok))
    api_ok = bool(ports) and all(c.healthy for c in comps if c.name == "kube-apiserver")
    count = state.nodes if state else 1
    node_list = tuple(lab_nodes.node_status(n, ports, api_ok) for n in layout.nodes(count, paths))
    sd = sdnode_run.node_status(paths, ports, api_ok) if state and state.systemd_node else None
    ready = all(n.ready for n in node_list) and (sd is None or sd.ready)
    ssh = f"{layout.SSH_USER}@127.0.0.1:{ports['sshd']}" if "sshd" in ports else ""
    is_up = all(c.running for c in comps) and all(n.up for n in node_list) and (sd is None or sd.up)
    classes: dict[str, str] = {}
    classes_error: str | None = "the API server is not healthy"
    api_version = None
    if api_ok:
        try:
            classes, classes_error = runtimes.runtime_classes(paths, ports), None
            api_version = components.api_server_version(paths, ports)
        except (OSError, ValueError, KeyError) as exc:
            classes_error = f"listing RuntimeClasses failed: {exc}"
    kept = kept_release(paths)
    return LabStatus(
        up=is_up,
        ready=ready,
        node=layout.NODE_NAME,
        kubeconfig=str(paths.kubeconfig),
        ssh_target=ssh,
        components=tuple(comps),
        nodes=node_list,
        left_behind=() if is_up else tuple(residue.left_behind(paths, state)),
        kept=() if is_up else tuple(residue.kept(paths)),
        runtime_classes=classes,
        runtime_classes_error=classes_error,
        release=kept.version if kept else None,
        api_server_version=api_version,
        kubelet_builds=tuple(placed_kubelets(paths)),
        systemd_node=sd,
        api_latency_ms=state.api_latency_ms if state else 0,
        api_jitter_ms=state.api_jitter_ms if state else 0,
        api_faults_kib=state.api_faults_kib if state else 0,
    )


def require_up(paths: Paths | None = None) -> LabStatus:
    st = status(paths)
    if not (st.up and st.ready):
        raise LabError("the lab is not up (run `abtest lab up`)")
    return st
