"""The files of the systemd node, laid out as kubeadm (and its Debian packages) lay out a
worker: the kubelet's unit and its 10-kubeadm.conf drop-in, /var/lib/kubelet/config.yaml,
kubeadm-flags.env, /etc/default/kubelet, /etc/kubernetes/kubelet.conf, a --config-dir
drop-in directory; containerd's unit and config; CNI; sshd's host key and the user's key.

The texts are kubeadm's (v1.36 `kubeadm join` output, the kubernetes deb package's unit and
drop-in); what the lab needs beyond them is in one --config-dir drop-in (LAB_DROPIN) and
the unit overrides named in `abtest-lab.conf`, each with its reason, so the node is a
kubeadm node plus what this machine requires.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from abtest.lab import layout

# kubeadm's paths (every one also in playbooks/nodes/kubeadm-systemd.yaml or the unit).
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"
DEFAULT_KUBELET = "/etc/default/kubelet"
KUBELET_UNIT = "/usr/lib/systemd/system/kubelet.service"
KUBEADM_DROPIN = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
KUBELET_KUBECONFIG = "/etc/kubernetes/kubelet.conf"
CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"
LAB_DROPIN = f"{CONFIG_DIR}/50-abtest-lab.conf"
CA_CERT = "/etc/kubernetes/pki/ca.crt"
KUBELET_PKI = "/var/lib/kubelet/pki"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
API_PORT = 6443

# The kubernetes deb package's kubelet.service, byte for byte.
KUBELET_SERVICE = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

# The kubernetes deb package's 10-kubeadm.conf, byte for byte.
TEN_KUBEADM = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""  # noqa: E501  (the package's own long lines)

# containerd's upstream containerd.service, less OOMScoreAdjust=-999: lowering an OOM score
# needs CAP_SYS_RESOURCE, which this machine's root lacks, and systemd refuses to start a
# unit whose OOM adjustment fails. The lab's own containerd runs without it too.
CONTAINERD_SERVICE = """[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity

[Install]
WantedBy=multi-user.target
"""

# systemd-nspawn bind-mounts the cgroup v1 controllers read-only (systemd's own hierarchies
# stay writable); the kubelet and runc create cgroups in every controller. A node's OS set-up
# step (kind's entrypoint does the like), before anything that makes cgroups starts.
CGROUPS_RW_UNIT = "abtest-cgroups-rw.service"
CGROUPS_RW_SERVICE = """[Unit]
Description=Remount the cgroup v1 controllers read-write (systemd-nspawn mounts them read-only)
DefaultDependencies=no
Before=sysinit.target containerd.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for d in /sys/fs/cgroup/*/; do \\
  mountpoint -q "$d" && mount -o remount,bind,rw "$d"; done'

[Install]
WantedBy=sysinit.target
"""

CONTAINERD_CONFIG = f"""version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{layout.PAUSE_IMAGE}"
  # This machine's root lacks CAP_SYS_RESOURCE: without this every sandbox fails on
  # oom_score_adj (the lab's own containerd sets it too).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
"""

CRICTL_YAML = (
    f"runtime-endpoint: unix://{CONTAINERD_SOCKET}\nimage-endpoint: unix://{CONTAINERD_SOCKET}\n"
)

SSHD_CONFIG = """# written by `abtest lab up --systemd-node`
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers abtest
"""


def kubelet_config(cluster_dns: str) -> str:
    """What `kubeadm join` (v1.36) writes to /var/lib/kubelet/config.yaml, with the lab's
    cluster DNS address (kubeadm takes it from the cluster's service subnet)."""
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: {CA_CERT}
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- {cluster_dns}
clusterDomain: cluster.local
containerRuntimeEndpoint: unix://{CONTAINERD_SOCKET}
cpuManagerReconcilePeriod: 0s
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {{}}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /etc/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"""


def kubeadm_flags(node_ip: str) -> str:
    return f'KUBELET_KUBEADM_ARGS="--node-ip={node_ip}"\n'


# The deb package ships KUBELET_EXTRA_ARGS= empty; the operator's --config-dir goes here.
DEFAULT_KUBELET_TEXT = f"KUBELET_EXTRA_ARGS=--config-dir={CONFIG_DIR}\n"

LAB_DROPIN_TEXT = """# What this machine needs beyond kubeadm's config (written by `abtest lab up`).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host mounts cgroup v1; since v1.35 a kubelet refuses to start there unless told.
failCgroupV1: false
"""


def kubelet_kubeconfig(server: str, ca_pem: bytes) -> str:
    """kubeadm's kubelet.conf after the TLS bootstrap: the client certificate is the
    rotation store's kubelet-client-current.pem. tls-server-name: the lab's API server
    certificate names `kubernetes`, not the host-side address the node dials."""
    ca = base64.b64encode(ca_pem).decode()
    current = f"{KUBELET_PKI}/kubelet-client-current.pem"
    return f"""apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: {server}
    tls-server-name: kubernetes
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
kind: Config
preferences: {{}}
users:
- name: default-auth
  user:
    client-certificate: {current}
    client-key: {current}
"""


def cni_config(pod_subnet: str) -> str:
    conf = {
        "cniVersion": "1.0.0",
        "name": "abtest-lab-systemd",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                # No masquerade and no portmap: pods reach nothing outside the node.
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_subnet}]]},
            }
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def in_root(root: Path, path: str) -> Path:
    """`path` of the node inside its root filesystem `root` on this machine."""
    return root / path.lstrip("/")
