"""The lab's control plane: its certificates and kubeconfigs, etcd's own PKI and peer URL, and
starting one component and waiting until it is healthy."""

from __future__ import annotations

from abtest.lab import api_proxy, components, host, layout, pki, sshd
from abtest.lab import nodes as lab_nodes
from abtest.lab.layout import Node, Paths, Say


def prepare(paths: Paths, ports: dict[str, int], fresh: bool, want: list[Node]) -> None:
    """Every certificate and kubeconfig of the control plane and the nodes in `want`, the
    /etc/hosts line, and the sshd (user, keys, config) the profiles reach the nodes by."""
    _etcd_pki(paths)
    ca = pki.ensure_ca(paths.pki)
    d = paths.pki
    pki.issue(
        ca,
        d,
        "apiserver",
        "kube-apiserver",
        server=True,
        dns=("kubernetes", "kubernetes.default", "localhost"),
        ips=("127.0.0.1", layout.API_SERVICE_IP),
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
    pki.ensure_service_account_key(d)
    write_kubeconfigs(paths, ports, ca)
    for node in want:
        lab_nodes.prepare(node, ports, fresh, ca)
    host.add_hosts_entry(nodes=want)
    sshd.ensure_user(paths)
    sshd.ensure_keys(paths)
    sshd.write_configs(paths, ports["sshd"])
    sshd.open_door(paths)


def write_kubeconfigs(paths: Paths, ports: dict[str, int], ca: pki.CertPair) -> None:
    """The control plane's clients and the admin reach the API server directly; node 1's
    kubelet through the proxy `--api-latency` delays (api_proxy.py), as every node's does."""
    d = paths.pki
    direct = f"https://127.0.0.1:{ports['apiserver']}"
    for user, cert, server in (
        ("admin", "admin", direct),
        ("scheduler", "scheduler", direct),
        ("controller-manager", "controller-manager", direct),
        ("kubelet", "kubelet", api_proxy.kubelet_server(ports)),
    ):
        pki.write_kubeconfig(
            paths.root / f"{user}.kubeconfig",
            server,
            ca,
            pki.CertPair(d / f"{cert}.crt", d / f"{cert}.key"),
            user,
        )


def _etcd_pki(paths: Paths) -> None:
    """etcd's own CA: it signs etcd's serving and peer certs and the API server's etcd
    client cert, nothing else, so etcd accepts no other lab certificate. The serving cert
    is a client cert too: etcd's HTTP gateway (/v3/...) dials etcd's own gRPC port with it."""
    ca = pki.ensure_ca(paths.etcd_pki, cn="abtest-lab-etcd-ca")
    for name, cn in (("server", "abtest-lab-etcd"), ("peer", "abtest-lab-etcd-peer")):
        pki.issue(
            ca,
            paths.etcd_pki,
            name,
            cn,
            server=True,
            client=True,
            dns=("localhost",),
            ips=("127.0.0.1",),
        )
    pki.issue(ca, paths.pki, "apiserver-etcd-client", "kube-apiserver-etcd-client", client=True)


def advertise_etcd_peer(paths: Paths, ports: dict[str, int], say: Say) -> None:
    """etcd keeps its member's peer URL in its data, from the first start. Data from an
    older lab (plain-HTTP etcd) or an earlier peer port still says so; the single member
    needs no peer, so etcd starts anyway, but the record is corrected to what it serves."""
    want = f"https://127.0.0.1:{ports['etcd_peer']}"
    members = components.etcd_post(paths, ports, "/v3/cluster/member/list", {})
    for member in members.get("members", []):
        if member.get("peerURLs") != [want]:
            components.etcd_post(
                paths,
                ports,
                "/v3/cluster/member/update",
                {"ID": member["ID"], "peerURLs": [want]},
            )
            say(f"  etcd member {member.get('name')}: peer URL {member.get('peerURLs')} -> {want}")


def apply_rbac(paths: Paths) -> None:
    """Let the API server's kubelet client reach the kubelet API (configz, metrics, logs)."""
    # The kubelet-client cert is in system:masters, which needs no binding: nothing to do.
    del paths
