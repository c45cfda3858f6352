"""What each lab component is: its command line and how to tell it is healthy."""

from __future__ import annotations

import json
import os
import socket
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from abtest.lab import kubelet_service, layout
from abtest.lab.files import PUBLIC_FILE, write_file
from abtest.lab.layout import Node, Paths

ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "sshd",
    "node-proxy-host",
    "node-proxy-netns",
)
# The processes each node has of its own (pid files in Node.pids); the rest of ORDER is the
# control plane and the one sshd, shared by all nodes.
NODE_COMPONENTS = ("containerd", "kubelet", "node-proxy-host", "node-proxy-netns")
# What /proc/PID/cmdline must contain for a pid file to still be ours.
EXPECT = {
    "etcd": "etcd",
    "kube-apiserver": "kube-apiserver",
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "containerd": "containerd",
    "kubelet": "kubelet",
    "sshd": "sshd",
    "node-proxy-host": "socat",
    "node-proxy-netns": "socat",
}


@dataclass(frozen=True)
class Spec:
    name: str
    argv: tuple[str, ...]
    netns: str | None = None
    #: variables set for the process on top of the caller's environment
    env: dict[str, str] = field(default_factory=dict)
    #: its working directory (None: the caller's)
    cwd: Path | None = None


# Where runc, crun, the CNI plugins' helpers and mount live on any Linux; kept on containerd's
# PATH even when the caller's PATH lacks them (a minimal sudo or CI environment).
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def containerd_path(bin_dir: Path, inherited: str | None) -> str:
    """containerd's PATH: the lab's binary directory first. containerd 1.7 runs the
    `containerd-shim-runc-v2` in its working directory, else the first on its PATH, and
    looks in its own directory only when PATH has none: with Debian's containerd installed
    its 1.6 shim (/usr/bin) would run the lab's pods unless the lab's own shim comes first.
    The lab also starts containerd in that directory (argv_for). The shim inherits this PATH
    and finds `runc` on it (the runc handler names no binary)."""
    first = str(bin_dir)
    rest = [p for p in (inherited or "").split(os.pathsep) if p and p != first]
    rest += [p for p in SYSTEM_PATH if p not in rest]
    return os.pathsep.join([first, *rest])


def containerd_env(bin_dir: Path) -> dict[str, str]:
    return {"PATH": containerd_path(bin_dir, os.environ.get("PATH"))}


def argv_for(name: str, paths: Paths, ports: dict[str, int], node: Node | None = None) -> Spec:
    """The command line of a control-plane component, or of `node`'s own one (default: node 1)."""
    b, pki = paths.bin, paths.pki
    node = node or Node(1, paths)
    if name == "etcd":
        # TLS on both listeners, and a client (or peer) must present a certificate from
        # etcd's own CA: only the API server holds one (pki.py). Both stay on loopback.
        client = f"https://127.0.0.1:{ports['etcd']}"
        peer = f"https://127.0.0.1:{ports['etcd_peer']}"
        ep = paths.etcd_pki
        return Spec(
            name,
            (
                str(b / "etcd"),
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
    if name == "kube-apiserver":
        return Spec(
            name,
            (
                str(b / "kube-apiserver"),
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
    if name == "kube-controller-manager":
        return Spec(
            name,
            (
                str(b / "kube-controller-manager"),
                f"--kubeconfig={paths.root / 'controller-manager.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['controller_manager']}",
                "--leader-elect=false",
                # root-ca-certificate-publisher: kube-root-ca.crt, which token-mounting pods need
                "--controllers=namespace,serviceaccount,garbagecollector,nodelifecycle,"
                "root-ca-certificate-publisher-controller",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                "--profiling=false",
                "--v=1",
            ),
        )
    if name == "kube-scheduler":
        return Spec(
            name,
            (
                str(b / "kube-scheduler"),
                f"--kubeconfig={paths.root / 'scheduler.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['scheduler']}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ),
        )
    if name == "containerd":
        # The lab's own build (binaries.CONTAINERD_VERSION), shared by every node.
        return Spec(
            name,
            (str(b / "containerd"), f"--config={node.containerd_dir / 'config.toml'}"),
            env=containerd_env(b),
            cwd=b,
        )
    if name == "sshd":
        return Spec(name, ("/usr/sbin/sshd", "-D", "-e", "-f", str(paths.ssh / "sshd_config")))
    kubelet_port = ports[node.port_key("kubelet")]
    if name == "node-proxy-host":
        return Spec(
            name,
            (
                "socat",
                f"UNIX-LISTEN:{node.bridge_sock},fork,unlink-early,mode=600",
                f"TCP:127.0.0.1:{kubelet_port}",
            ),
        )
    if name == "node-proxy-netns":
        return Spec(
            name,
            (
                "socat",
                f"TCP-LISTEN:{kubelet_port},bind={node.proxy_ip},fork,reuseaddr",
                f"UNIX-CONNECT:{node.bridge_sock}",
            ),
            netns=node.netns,
        )
    raise KeyError(name)


def kubelet_config_text(node: Node, ports: dict[str, int]) -> str:
    pki, ca = node.pki, node.paths.pki / "ca.crt"
    return _kubelet_config_head(node, ports, pki, ca) + _own_node_lines(node)


def _own_node_lines(node: Node) -> str:
    if node.first:
        return ""  # node 1's config is the single-node lab's, byte for byte
    return f"""# This node's own cgroup root and pod log directory (see layout.Node).
cgroupRoot: {node.cgroup_root}
podLogsDir: {node.pod_logs_dir}
"""


def _kubelet_config_head(node: Node, ports: dict[str, int], pki: Path, ca: Path) -> str:
    return f"""# Lab kubelet configuration, written by `abtest lab up`. abtest experiments edit it
# in place (and always put it back); `lab up` rewrites it only in a fresh state directory.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {ports[node.port_key("kubelet")]}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {ports[node.port_key("kubelet_healthz")]}
tlsCertFile: {pki / "kubelet-serving.crt"}
tlsPrivateKeyFile: {pki / "kubelet-serving.key"}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://{node.containerd_socket}
cgroupDriver: cgroupfs
# The lab VM mounts cgroup v1; every supported kubelet still runs there when told to (the
# default turned to true in v1.35: a kubelet with this unset refuses to start here).
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [{layout.CLUSTER_DNS_IP}]
resolvConf: /etc/resolv.conf
maxPods: 250
serializeImagePulls: false
kubeAPIQPS: 50
kubeAPIBurst: 100
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
# The null control's gate at its catalog off level. No gate a supported kubelet lacks
# (PLEGOnDemandRelist is v1.36+) is set here: every kubelet_build arm runs this file.
featureGates:
  ContainerCheckpoint: true
"""


def kubelet_flags(node: Node) -> list[str]:
    return [
        f"--config={node.kubelet_config}",
        f"--kubeconfig={node.kubelet_kubeconfig}",
        f"--hostname-override={node.name}",
        f"--root-dir={node.kubelet_dir / 'root'}",
        f"--cert-dir={node.kubelet_dir / 'pki'}",
        "--v=1",
    ]


def kept_config_notes(node: Node) -> list[str]:
    """What a kubelet config kept from an older lab lacks that a fresh one has (`up` never
    rewrites a kept config: an experiment's journaled change may be in it)."""
    if not node.kubelet_config.exists():
        return []
    try:
        config = YAML(typ="safe", pure=True).load(node.kubelet_config.read_text())
    except YAMLError:
        return []  # not ours to judge here: the kubelet's own start names what is wrong
    if not isinstance(config, dict) or config.get("clusterDNS"):
        return []
    return [
        f"{node.name}: its kubelet config is from an older lab and has no clusterDNS, so "
        "every pod writes MissingClusterDNS warning events at each sync (docs/lab.md, "
        "'Cluster DNS'); `abtest lab down --purge && abtest lab up` gives it one"
    ]


def write_kubelet_files(node: Node, ports: dict[str, int], fresh: bool) -> Path:
    if fresh or not node.kubelet_config.exists():
        write_file(node.kubelet_config, kubelet_config_text(node, ports), PUBLIC_FILE)
    write_file(node.kubelet_dir / "flags", "\n".join(kubelet_flags(node)) + "\n", PUBLIC_FILE)
    script = node.bin / "kubelet-service"
    write_file(script, kubelet_service.script(node), 0o755)
    return script


# --- health probes -------------------------------------------------------------------------


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


def healthy(name: str, paths: Paths, ports: dict[str, int], node: Node | None = None) -> bool:
    node = node or Node(1, paths)
    try:
        if name == "etcd":
            return http_ok(etcd_url(ports, "/health"), etcd_tls(paths))
        if name == "kube-apiserver":
            return http_ok(f"https://127.0.0.1:{ports['apiserver']}/readyz", _tls(paths))
        if name == "kube-controller-manager":
            return http_ok(
                f"https://127.0.0.1:{ports['controller_manager']}/healthz",
                _tls(paths, verify=False),
            )
        if name == "kube-scheduler":
            return http_ok(
                f"https://127.0.0.1:{ports['scheduler']}/healthz", _tls(paths, verify=False)
            )
        if name == "containerd":
            return _connects_unix(node.containerd_socket)
        if name == "kubelet":
            return http_ok(f"http://127.0.0.1:{ports[node.port_key('kubelet_healthz')]}/healthz")
        if name == "sshd":
            with socket.create_connection(("127.0.0.1", ports["sshd"]), timeout=2) as s:
                return s.recv(4).startswith(b"SSH-")
        if name == "node-proxy-host":
            return _connects_unix(node.bridge_sock)
        if name == "node-proxy-netns":
            # A full TLS handshake, so the kubelet does not log an aborted one every probe.
            ctx = _tls(paths, verify=False)
            with (
                socket.create_connection(
                    (node.proxy_ip, ports[node.port_key("kubelet")]), timeout=2
                ) as s,
                ctx.wrap_socket(s, server_hostname=node.name),
            ):
                return True
    except (OSError, ValueError, KeyError):
        return False
    return False


def _connects_unix(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(str(path))
    return True
