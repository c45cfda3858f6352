"""The lab's components: one small object each that knows its command line, how to tell it
is healthy, its pid file and log, and how to start and stop itself (pyperf's ``Operation`` per
host setting is the model). Adding one (a latency-injecting proxy) is one class here and its
place in ``COMPONENTS``; ``lab up``, ``down``, ``status`` and the residue check go through them.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from abtest.errors import LabError
from abtest.lab import api_proxy, layout
from abtest.lab.containerd_path import containerd_env
from abtest.lab.layout import Node, Paths, Say
from abtest.lab.processes import alive, read_pid, start, stop, wait_until


@dataclass(frozen=True)
class Spec:
    name: str
    argv: tuple[str, ...]
    netns: str | None = None
    #: variables set for the process on top of the caller's environment
    env: dict[str, str] = field(default_factory=dict)
    #: its working directory (None: the caller's)
    cwd: Path | None = None


# --- probes -------------------------------------------------------------------------


def _tls(paths: Paths, verify: bool = True) -> ssl.SSLContext:
    if not verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx = ssl.create_default_context(cafile=str(paths.pki / "ca.crt"))
    ctx.load_cert_chain(str(paths.pki / "admin.crt"), str(paths.pki / "admin.key"))
    return ctx


def etcd_tls(paths: Paths, client: bool = True) -> ssl.SSLContext:
    """Verifies etcd against etcd's CA and (client=True) presents the API server's etcd
    client certificate, the only one etcd accepts."""
    ctx = ssl.create_default_context(cafile=str(paths.etcd_pki / "ca.crt"))
    if client:
        ctx.load_cert_chain(
            str(paths.pki / "apiserver-etcd-client.crt"),
            str(paths.pki / "apiserver-etcd-client.key"),
        )
    return ctx


def etcd_url(ports: dict[str, int], path: str = "") -> str:
    return f"https://127.0.0.1:{ports['etcd']}{path}"


def etcd_post(paths: Paths, ports: dict[str, int], path: str, body: dict[str, Any]) -> Any:
    """One call to etcd's v3 HTTP gateway as the API server (its only client)."""
    req = urllib.request.Request(
        etcd_url(ports, path), data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(req, timeout=10, context=etcd_tls(paths)) as resp:
        return json.loads(resp.read())


def http_ok(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
        return bool(resp.status == 200)


def api_get(paths: Paths, ports: dict[str, int], path: str) -> dict[str, Any]:
    url = f"https://127.0.0.1:{ports['apiserver']}{path}"
    with urllib.request.urlopen(url, timeout=5, context=_tls(paths)) as resp:
        return dict(json.loads(resp.read()))


def api_call(
    paths: Paths,
    ports: dict[str, int],
    path: str,
    method: str,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    url = f"https://127.0.0.1:{ports['apiserver']}{path}"
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=10, context=_tls(paths)) as resp:
        return dict(json.loads(resp.read()))


def node_ready(paths: Paths, ports: dict[str, int], name: str = layout.NODE_NAME) -> bool:
    return node_readiness(paths, ports, name)[0]


def node_readiness(
    paths: Paths, ports: dict[str, int], name: str = layout.NODE_NAME
) -> tuple[bool, str | None]:
    """Is the node Ready, and the kubelet version it reports (nodeInfo.kubeletVersion)."""
    obj: dict[str, Any] = api_get(paths, ports, f"/api/v1/nodes/{name}")
    status = obj.get("status", {})
    conditions = status.get("conditions", [])
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready, status.get("nodeInfo", {}).get("kubeletVersion")


def api_server_version(paths: Paths, ports: dict[str, int]) -> str | None:
    """The control plane's version as the API server reports it (/version gitVersion)."""
    return api_get(paths, ports, "/version").get("gitVersion")


# --- the components ------------------------------------------------------------------------


class Component:
    """One process of the lab. ``argv`` and ``probe`` are each component's own; the rest
    (its pid file, log, start and stop) is the same for all but the kubelet's."""

    name: ClassVar[str]
    #: what /proc/PID/cmdline must contain for a pid file to still be ours
    expect: ClassVar[str]
    #: True: each node has its own (pid file in Node.pids); False: one for the whole lab
    per_node: ClassVar[bool] = False
    #: how long `up` waits for it to be healthy, in seconds
    start_timeout: ClassVar[float] = 60.0

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        raise KeyError(self.name)  # started otherwise (the kubelet: by its script)

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        """True when it answers as a healthy one does; may raise when it does not answer."""
        raise NotImplementedError

    def healthy(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        try:
            return self.probe(paths, ports, node)
        except (OSError, ValueError, KeyError):
            return False

    def log(self, node: Node) -> Path:
        return node.logs / f"{self.name}.log"

    def label(self, node: Node) -> str:
        return self.name if node.first else f"{node.name} {self.name}"

    def launch(self, node: Node, ports: dict[str, int]) -> None:
        spec = self.argv(node.paths, ports, node)
        start(self.name, spec.argv, self.log(node), node.pids, netns=spec.netns, env=spec.env,
              cwd=spec.cwd)  # fmt: skip

    def start(self, node: Node, ports: dict[str, int], say: Say) -> None:
        """Start it on `node` (node 1 for the control plane) and wait until it is healthy."""
        t0 = time.monotonic()
        self.launch(node, ports)
        wait_until(
            self.label(node),
            lambda: self.healthy(node.paths, ports, node),
            self.start_timeout,
            # No cmdline check here: right after fork the child may not have exec'd yet.
            still_running=lambda: alive(read_pid(node.pids, self.name)),
            log=self.log(node),
        )
        say(f"  {self.label(node)} healthy in {time.monotonic() - t0:.1f} s")

    def running(self, node: Node) -> int | None:
        """Its pid, when its pid file names a live process that is still it."""
        pid = read_pid(node.pids, self.name)
        return pid if alive(pid, self.expect) else None

    def stop(self, node: Node) -> bool:
        """Stop it; False when it was not running."""
        return stop(self.name, node.pids, self.expect)


class Etcd(Component):
    name = "etcd"
    expect = "etcd"

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        # TLS on both listeners, and a client (or peer) must present a certificate from
        # etcd's own CA: only the API server holds one (pki.py). Both stay on loopback.
        client = f"https://127.0.0.1:{ports['etcd']}"
        peer = f"https://127.0.0.1:{ports['etcd_peer']}"
        ep = paths.etcd_pki
        return Spec(
            self.name,
            (
                str(paths.bin / "etcd"),
                "--name=lab",
                f"--data-dir={paths.etcd_data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=lab={peer}",
                f"--cert-file={ep / 'server.crt'}",
                f"--key-file={ep / 'server.key'}",
                "--client-cert-auth=true",
                f"--trusted-ca-file={ep / 'ca.crt'}",
                f"--peer-cert-file={ep / 'peer.crt'}",
                f"--peer-key-file={ep / 'peer.key'}",
                "--peer-client-cert-auth=true",
                f"--peer-trusted-ca-file={ep / 'ca.crt'}",
                "--log-level=warn",
            ),
        )

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        return http_ok(etcd_url(ports, "/health"), etcd_tls(paths))


class ApiServer(Component):
    name = "kube-apiserver"
    expect = "kube-apiserver"
    start_timeout = 120.0

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        pki = paths.pki
        return Spec(
            self.name,
            (
                str(paths.bin / "kube-apiserver"),
                f"--etcd-servers=https://127.0.0.1:{ports['etcd']}",
                f"--etcd-cafile={paths.etcd_pki / 'ca.crt'}",
                f"--etcd-certfile={pki / 'apiserver-etcd-client.crt'}",
                f"--etcd-keyfile={pki / 'apiserver-etcd-client.key'}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports['apiserver']}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                # The node's Hostname resolves into the lab netns (see layout.NETNS).
                "--kubelet-preferred-address-types=Hostname,InternalIP",
                f"--service-cluster-ip-range={layout.SERVICE_SUBNET}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                # privileged pods: a node profile with `transport: pod` reaches the lab node
                # through one (docs/node-safety.md); the API server refuses them by default
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                # A loopback advertise address is not a valid endpoint for the kubernetes service.
                "--endpoint-reconciler-type=none",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                "--profiling=false",
                "--v=1",
            ),
        )

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        return http_ok(f"https://127.0.0.1:{ports['apiserver']}/readyz", _tls(paths))


class _LoopbackController(Component):
    """A control-plane controller the lab runs on loopback (the controller manager, the
    scheduler): its kubeconfig, its secure port (``port`` in ``ports``, probed at /healthz),
    no leader election, no profiling; ``flags`` adds its own."""

    port = ""

    def flags(self, paths: Paths) -> tuple[str, ...]:
        return ()

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        kubeconfig = self.name.removeprefix("kube-")
        return Spec(
            self.name,
            (
                str(paths.bin / self.name),
                f"--kubeconfig={paths.root / f'{kubeconfig}.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports[self.port]}",
                "--leader-elect=false",
                *self.flags(paths),
                "--profiling=false",
                "--v=1",
            ),
        )

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        url = f"https://127.0.0.1:{ports[self.port]}/healthz"
        return http_ok(url, _tls(paths, verify=False))


class ControllerManager(_LoopbackController):
    name = "kube-controller-manager"
    expect = "kube-controller-manager"
    port = "controller_manager"

    def flags(self, paths: Paths) -> tuple[str, ...]:
        return (
            # root-ca-certificate-publisher: kube-root-ca.crt, which token-mounting pods need
            "--controllers=namespace,serviceaccount,garbagecollector,nodelifecycle,"
            "root-ca-certificate-publisher-controller",
            f"--service-account-private-key-file={paths.pki / 'sa.key'}",
            f"--root-ca-file={paths.pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
        )


class Scheduler(_LoopbackController):
    name = "kube-scheduler"
    expect = "kube-scheduler"
    port = "scheduler"


class ApiProxy(Component):
    """The kubelets' way to the API server, where `lab up --api-latency` puts its delay
    (api_proxy.py: why every kubelet goes through it, and which stream is delayed)."""

    name = "api-proxy"
    expect = "toxiproxy-server"

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        return Spec(self.name, api_proxy.argv(paths, ports), env=dict(api_proxy.ENV))

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        return api_proxy.serving(ports)

    def launch(self, node: Node, ports: dict[str, int]) -> None:
        api_proxy.write_config(node.paths, ports)  # the proxy it serves, read at its start
        super().launch(node, ports)


class Containerd(Component):
    name = "containerd"
    expect = "containerd"
    per_node = True

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        # The lab's own build (binaries.CONTAINERD_VERSION), shared by every node.
        b = paths.bin
        return Spec(
            self.name,
            (str(b / "containerd"), f"--config={node.containerd_dir / 'config.toml'}"),
            env=containerd_env(b),
            cwd=b,
        )

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        return _connects_unix(node.containerd_socket)


class Kubelet(Component):
    """Started and stopped by the node's kubelet-service script (kubelet_files.py writes it),
    so that an experiment restarts it the same way over SSH."""

    name = "kubelet"
    expect = "kubelet"
    per_node = True
    start_timeout = 120.0

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        return http_ok(f"http://127.0.0.1:{ports[node.port_key('kubelet_healthz')]}/healthz")

    def launch(self, node: Node, ports: dict[str, int]) -> None:
        subprocess.run([str(node.bin / "kubelet-service"), "start"], check=True)

    def stop(self, node: Node) -> bool:
        script = node.bin / "kubelet-service"
        if not script.exists():
            return False
        proc = subprocess.run([str(script), "stop"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise LabError(
                f"{node.name} kubelet: `kubelet-service stop` failed: {proc.stderr.strip()}"
            )
        return True


class Sshd(Component):
    """The one sshd the node profiles reach every lab node by."""

    name = "sshd"
    expect = "sshd"

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        return Spec(self.name, ("/usr/sbin/sshd", "-D", "-e", "-f", str(paths.ssh / "sshd_config")))

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        with socket.create_connection(("127.0.0.1", ports["sshd"]), timeout=2) as s:
            return s.recv(4).startswith(b"SSH-")


class NodeProxyHost(Component):
    """The host half of the API server's way to the node's kubelet in its netns: a unix
    socket both sides see, forwarded to the kubelet's port on the host's loopback."""

    name = "node-proxy-host"
    expect = "socat"
    per_node = True

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        kubelet_port = ports[node.port_key("kubelet")]
        return Spec(
            self.name,
            (
                "socat",
                f"UNIX-LISTEN:{node.bridge_sock},fork,unlink-early,mode=600",
                f"TCP:127.0.0.1:{kubelet_port}",
            ),
        )

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        return _connects_unix(node.bridge_sock)


class NodeProxyNetns(Component):
    """The netns half: the kubelet's port on the node's address, forwarded to the socket."""

    name = "node-proxy-netns"
    expect = "socat"
    per_node = True

    def argv(self, paths: Paths, ports: dict[str, int], node: Node) -> Spec:
        return Spec(
            self.name,
            (
                "socat",
                f"TCP-LISTEN:{ports[node.port_key('kubelet')]},bind={node.proxy_ip},fork,reuseaddr",
                f"UNIX-CONNECT:{node.bridge_sock}",
            ),
            netns=node.netns,
        )

    def probe(self, paths: Paths, ports: dict[str, int], node: Node) -> bool:
        # A full TLS handshake, so the kubelet does not log an aborted one every probe.
        ctx = _tls(paths, verify=False)
        with (
            socket.create_connection(
                (node.proxy_ip, ports[node.port_key("kubelet")]), timeout=2
            ) as s,
            ctx.wrap_socket(s, server_hostname=node.name),
        ):
            return True


#: Every component, in the order `lab up` starts them (`down` stops them in reverse).
COMPONENTS: tuple[Component, ...] = (
    Etcd(),
    ApiServer(),
    ControllerManager(),
    Scheduler(),
    ApiProxy(),
    Containerd(),
    Kubelet(),
    Sshd(),
    NodeProxyHost(),
    NodeProxyNetns(),
)
BY_NAME = {c.name: c for c in COMPONENTS}
ORDER = tuple(c.name for c in COMPONENTS)
# The processes each node has of its own (pid files in Node.pids); the rest of ORDER is the
# control plane and the one sshd, shared by all nodes.
PER_NODE = tuple(c for c in COMPONENTS if c.per_node)
NODE_COMPONENTS = tuple(c.name for c in PER_NODE)
# What /proc/PID/cmdline must contain for a pid file to still be ours.
EXPECT = {c.name: c.expect for c in COMPONENTS}


def component(name: str) -> Component:
    """The component named `name`; KeyError for no such one."""
    return BY_NAME[name]


def argv_for(name: str, paths: Paths, ports: dict[str, int], node: Node | None = None) -> Spec:
    """The command line of a control-plane component, or of `node`'s own one (default: node 1)."""
    return BY_NAME[name].argv(paths, ports, node or Node(1, paths))


def healthy(name: str, paths: Paths, ports: dict[str, int], node: Node | None = None) -> bool:
    return BY_NAME[name].healthy(paths, ports, node or Node(1, paths))


def _connects_unix(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(str(path))
    return True
