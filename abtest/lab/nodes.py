"""The lab's nodes (`lab up --nodes N`): prepare, start, stop and remove one node, write
its profile, and say how it is. Node 1 is the single-node lab's; nodes 2..N have their
own everything below the shared control plane and sshd (see layout.Node)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.parse
from dataclasses import asdict, dataclass

from abtest.config import datafiles
from abtest.errors import LabError, UserError
from abtest.lab import api_proxy, components, host, images, kubelet_files, layout, pki, runtimes
from abtest.lab.files import PUBLIC_FILE, install_binary, make_dir, write_file
from abtest.lab.layout import Node, Paths, Say
from abtest.lab.processes import alive, read_pid

# Preferred ports of node i: node 1's plus 100 x (i - 1), so 10350/10348 for node 2.
PORT_STEP = 100
PREFERRED_NODE_PORTS = {"kubelet": 10250, "kubelet_healthz": 10248}


def check_count(count: int) -> None:
    """`--nodes` within 1..MAX_NODES, before anything is touched."""
    if not 1 <= count <= layout.MAX_NODES:
        raise UserError(
            f"--nodes {count} is not between 1 and {layout.MAX_NODES}",
            "abtest lab up",
            f"this 2-core machine holds at most {layout.MAX_NODES} lab nodes (each is a kubelet "
            "and a containerd beside the control plane); pick a count in that range",
        )


def preferred_port(node: Node, kind: str) -> int:
    return PREFERRED_NODE_PORTS[kind] + PORT_STEP * (node.index - 1)


def present(paths: Paths, count: int) -> list[Node]:
    """Nodes 1..count and any other node whose directories are still on this machine
    (a lab brought down with more nodes than the next `up` asks for)."""
    found = {i for i in range(1, count + 1)}
    for parent in (paths.root / "nodes", paths.run / "nodes"):
        if parent.is_dir():
            for entry in parent.iterdir():
                index = layout.node_index(entry.name)
                if index is not None:
                    found.add(index)
    return [Node(i, paths) for i in sorted(found)]


# --- prepare --------------------------------------------------------------------------------


def prepare(node: Node, ports: dict[str, int], fresh: bool, ca: pki.CertPair) -> None:
    """Everything a node needs on disk before its processes start (idempotent)."""
    for d in node.dirs():
        make_dir(d)
    if not node.first:
        _install_own_kubelet(node)
        pki.issue(
            ca, node.pki, "kubelet", f"system:node:{node.name}", org="system:nodes", client=True
        )
    pki.issue(
        ca,
        node.pki,
        "kubelet-serving",
        f"system:node:{node.name}",
        server=True,
        dns=(node.name, "localhost"),
        ips=("127.0.0.1", node.proxy_ip),
    )
    if not node.first:
        pki.write_kubeconfig(
            node.kubelet_kubeconfig,
            api_proxy.kubelet_server(ports),  # as node 1's (control_plane.prepare)
            ca,
            pki.CertPair(node.pki / "kubelet.crt", node.pki / "kubelet.key"),
            "kubelet",
        )
        assert node.cgroup_root is not None
        host.make_cgroup_root(node.cgroup_root)
    host.write_cni_config(node)
    host.write_containerd_config(node)
    host.setup_node_proxy_netns(node)
    kubelet_files.write_kubelet_files(node, ports, fresh or not node.kubelet_config.exists())
    if node.profile is not None:
        write_file(node.profile, profile_text(node), PUBLIC_FILE)


def _install_own_kubelet(node: Node) -> None:
    """Node i's own copy of the kubelet binary (same size and mtime: left alone)."""
    install_binary(node.paths.bin / "kubelet", node.bin / "kubelet")


def profile_text(node: Node) -> str:
    """Node i's profile: the shipped playbooks/nodes/lab.yaml with node 1's name and
    node-side paths replaced by node i's, so both stay in step. Every replaced text must be
    in the shipped file: if that file changes shape this fails rather than write a profile
    that still points at node 1."""
    shipped = datafiles.data_dir("playbooks") / "nodes" / "lab.yaml"
    text = shipped.read_text()
    one = Node(1, node.paths)
    swaps = [
        ("profile: lab\n", f"profile: lab-{node.index}\n"),
        (f"node_name: {one.name}\n", f"node_name: {node.name}\n"),
        (str(one.kubelet_config), str(node.kubelet_config)),
        (f"{one.bin}/kubelet", f"{node.bin}/kubelet"),  # the binary and kubelet-service
        (str(one.logs / "kubelet.log"), str(node.logs / "kubelet.log")),
        (str(one.containerd_socket), str(node.containerd_socket)),
        (f"lock_path: {one.lock_path}\n", f"lock_path: {node.lock_path}\n"),
    ]
    for old, new in swaps:
        if old not in text:
            raise LabError(
                f"{shipped} no longer contains {old.strip()!r}: cannot derive {node.name}'s profile"
            )
        text = text.replace(old, new)
    head = (
        f"# Node {node.index} of the embedded lab, written by `abtest lab up --nodes N` from\n"
        f"# {shipped.name} (rewritten by every `up`; removed with the node).\n"
    )
    return head + text


# --- start and health -------------------------------------------------------------------------


def start_node(node: Node, ports: dict[str, int], say: Say) -> None:
    """Start one of nodes 2..N (node 1 starts within the lab's ORDER)."""
    for comp in components.PER_NODE:
        if comp.running(node) is not None:
            if comp.healthy(node.paths, ports, node):
                continue
            comp.stop(node)
        comp.start(node, ports, say)
        if comp.name == "containerd":
            images.import_images(node.paths, node)


@dataclass(frozen=True)
class NodeStatus:
    name: str
    index: int
    profile: str
    running: dict[str, int | None]
    healthy: dict[str, bool]
    ready: bool
    # The runtime handlers the node's containerd reports (`crictl info`), sorted; empty
    # with the reason in runtime_handlers_error when it could not be asked.
    runtime_handlers: tuple[str, ...] = ()
    runtime_handlers_error: str | None = None
    #: the kubelet version the node reports (nodeInfo.kubeletVersion; None: not asked)
    kubelet_version: str | None = None
    #: the version the node's running containerd reports (the CRI Version call), or None
    #: with the reason in containerd_version_error
    containerd_version: str | None = None
    containerd_version_error: str | None = None

    @property
    def up(self) -> bool:
        return all(pid is not None for pid in self.running.values())

    def as_json(self) -> dict[str, object]:
        """Every field (a new one shows in `lab status --json` by itself), with the per-
        component pids and health as one ``components`` map."""
        fields = {k: v for k, v in asdict(self).items() if k != "running"}
        return {
            **fields,
            "up": self.up,
            "healthy": all(self.healthy.values()),
            "components": {
                n: {
                    "pid": self.running[n],
                    "running": self.running[n] is not None,
                    "healthy": self.healthy[n],
                }
                for n in components.NODE_COMPONENTS
            },
        }


# absolute, so the path `lab status --json` prints works as --profile from any folder
SHIPPED_PROFILE = str(datafiles.data_dir("playbooks") / "nodes" / "lab.yaml")


def node_status(node: Node, ports: dict[str, int], api_ok: bool) -> NodeStatus:
    running: dict[str, int | None] = {}
    healthy: dict[str, bool] = {}
    for comp in components.PER_NODE:
        pid = comp.running(node)
        running[comp.name] = pid
        ok = pid is not None and bool(ports)
        healthy[comp.name] = ok and comp.healthy(node.paths, ports, node)
    ready, version = False, None
    if api_ok and ports:
        try:
            ready, version = components.node_readiness(node.paths, ports, node.name)
        except (OSError, ValueError):
            ready = False
    profile = SHIPPED_PROFILE if node.profile is None else str(node.profile)
    handlers: tuple[str, ...] = ()
    handlers_error: str | None = "containerd is not running"
    runtime_version: str | None = None
    runtime_version_error: str | None = handlers_error
    if healthy["containerd"]:
        handlers, handlers_error = runtimes.node_handlers(node)
        runtime_version, runtime_version_error = runtimes.node_runtime_version(node)
    return NodeStatus(
        node.name,
        node.index,
        profile,
        running,
        healthy,
        ready,
        handlers,
        handlers_error,
        version,
        runtime_version,
        runtime_version_error,
    )


# --- stop and remove ---------------------------------------------------------------------------


def remove_sandboxes(node: Node, say: Say) -> None:
    crictl = node.paths.bin / "crictl"
    if not (crictl.exists() and alive(read_pid(node.pids, "containerd"), "containerd")):
        return
    base = [
        str(crictl),
        "--runtime-endpoint",
        f"unix://{node.containerd_socket}",
        "--timeout",
        "30s",
    ]
    ids = subprocess.run([*base, "pods", "-q"], capture_output=True, text=True).stdout.split()
    for pod_id in ids:
        subprocess.run([*base, "stopp", pod_id], capture_output=True)
        subprocess.run([*base, "rmp", "-f", pod_id], capture_output=True)
    if ids:
        say(f"  {node.name}: removed {len(ids)} pod sandboxes")


def stop_node(node: Node, say: Say) -> list[str]:
    """Stop one of nodes 2..N: kubelet, its sandboxes, then containerd and the proxies.
    Returns what could not be stopped, one line each."""
    problems: list[str] = []
    try:
        components.component("kubelet").stop(node)
    except LabError as exc:
        problems.append(str(exc))
    remove_sandboxes(node, say)
    for name in ("node-proxy-netns", "node-proxy-host", "containerd"):
        try:
            if components.component(name).stop(node):
                say(f"  stopped {node.name} {name}")
        except LabError as exc:
            problems.append(str(exc))
    return problems


def remove_node(node: Node, ports: dict[str, int] | None, say: Say) -> list[str]:
    """Take one of nodes 2..N away for good (`up --nodes M` with M below it): stop it,
    delete its Node object (and the pods bound to it, which no kubelet will ever run
    again), its network, cgroups, /etc/hosts line and directories."""
    assert not node.first
    problems = stop_node(node, say)
    if problems:
        return problems
    if ports:
        problems += delete_node_object(node.paths, ports, node.name, say)
    host.unmount_under([node.home, node.run])
    assert node.cgroup_root is not None
    host.remove_kubepods_cgroups((node.cgroup_root,))
    host.teardown_networking([node])
    for d in (node.run, node.home):
        if d.exists():
            shutil.rmtree(
                d, onerror=lambda _f, p, e: problems.append(f"{p}: cannot remove ({e[1]})")
            )
    for parent in (node.home.parent, node.run.parent):
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()  # the last extra node is gone: no empty nodes/ left behind
    if not problems:
        say(f"  removed node {node.name}")
    return problems


def delete_node_object(paths: Paths, ports: dict[str, int], name: str, say: Say) -> list[str]:
    """Delete the Node object `name` and force-delete the pods bound to it (no podgc runs
    in the lab: they would stay Running forever). A missing object is fine."""
    problems: list[str] = []
    selector = urllib.parse.quote(f"spec.nodeName={name}")
    try:
        pods = components.api_get(paths, ports, f"/api/v1/pods?fieldSelector={selector}")
        for pod in pods.get("items", []):
            meta = pod["metadata"]
            components.api_call(
                paths,
                ports,
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}?gracePeriodSeconds=0",
                "DELETE",
            )
        components.api_call(paths, ports, f"/api/v1/nodes/{name}", "DELETE")
        say(
            f"  deleted Node {name}"
            + (f" and its {len(pods['items'])} pods" if pods.get("items") else "")
        )
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            problems.append(f"Node {name}: delete failed: HTTP {exc.code} {exc.reason}")
    except OSError as exc:
        problems.append(f"Node {name}: delete failed: {exc}")
    return problems


def stale_node_objects(paths: Paths, ports: dict[str, int], count: int) -> list[str]:
    """Names of Node objects of lab nodes beyond `count` (left by an earlier, larger lab)."""
    listed = components.api_get(paths, ports, "/api/v1/nodes")
    names = [item["metadata"]["name"] for item in listed.get("items", [])]
    return sorted(n for n in names if (layout.node_index(n) or 0) > count)
