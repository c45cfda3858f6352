"""The kubelet's files on a lab node: its KubeletConfiguration, its flags and the
kubelet-service script that starts and stops it (the kubelet component's, in components.py)."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from abtest.lab import kubelet_service, layout
from abtest.lab.files import PUBLIC_FILE, write_file
from abtest.lab.layout import Node


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
