"""The lab's systemd node (issue 28) without a lab: its profile, its kubeadm files, its
nspawn command line and its state. The real node is tested in test_systemd_node_lab.py."""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from abtest.config.playbook import NodeProfile, load_profile, parse_profile
from abtest.lab import components, layout, sdnode, sdnode_image, sdnode_run
from abtest.lab import sdnode_files as sf
from abtest.lab.layout import LabState, Paths
from abtest.node.kubelet_config import parse_config

# The lines of the shipped kubeadm profile that say how the node is reached.
REACH = (
    "profile:",
    "node_name:",
    "kubeconfig:",
    "  host:",
    "  user:",
    "  agent:",
    "  known_hosts:",
)


def test_profile_differs_from_the_shipped_one_only_in_how_the_node_is_reached(
    tmp_path: Path,
) -> None:
    node = sdnode.SystemdNode(Paths(tmp_path / "root", tmp_path / "run"))
    text = sdnode.profile_text(node)
    shipped_path = Path(load_profile("kubeadm-systemd").source)
    shipped = shipped_path.read_text()
    changed = [
        line[1:]
        for line in difflib.ndiff(shipped.splitlines(), text.splitlines())
        if line[:1] in "-+" and not line[2:].startswith("#")
    ]
    for line in changed:
        # how the node is reached, and where `lab kubelets` places builds in it
        assert line.lstrip(" ").startswith((*(r.strip() for r in REACH), "key:", "builds_dir:"))
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    ours, theirs = parse_profile(path), load_profile("kubeadm-systemd")
    reach = {"name", "source", "node_name", "kubeconfig", "ssh", "text", "kubelet_builds_dir"}
    for f in fields(NodeProfile):
        if f.name not in reach:
            assert getattr(ours, f.name) == getattr(theirs, f.name), f.name
    assert ours.ssh is not None  # an SSH profile (transport: pod has none)
    assert ours.node_name == sdnode.NAME and ours.ssh.host == sdnode.NODE_IP
    assert ours.ssh.port == 22 and ours.ssh.user == sdnode.SSH_USER
    assert ours.ssh.key_file == str(node.ssh / "client_ed25519") and not ours.ssh.use_agent
    assert ours.ssh.known_hosts == str(node.ssh / "known_hosts")
    assert ours.kubeconfig == str(node.paths.kubeconfig)
    assert ours.kubelet_builds_dir == sdnode.BUILDS_DIR and theirs.kubelet_builds_dir is None


def test_kubelet_files_are_kubeadms() -> None:
    config = parse_config(sf.kubelet_config(layout.CLUSTER_DNS_IP))
    assert config["cgroupDriver"] == "systemd" and config["healthzPort"] == 10248
    assert config["clusterDNS"] == [layout.CLUSTER_DNS_IP]
    assert config["staticPodPath"] == "/etc/kubernetes/manifests"
    assert config["authentication"]["x509"]["clientCAFile"] == sf.CA_CERT
    assert "featureGates" not in config  # kubeadm sets none: an experiment adds them
    profile = load_profile("kubeadm-systemd")
    assert profile.kubelet_config_path == sf.KUBELET_CONFIG
    # the unit's ExecStart carries every source of flags the pre-flight reads
    exec_start = sf.TEN_KUBEADM.strip().splitlines()[-1]
    for var in ("KUBELET_KUBECONFIG_ARGS", "KUBELET_CONFIG_ARGS", "KUBELET_KUBEADM_ARGS"):
        assert f"${var}" in exec_start
    assert "$KUBELET_EXTRA_ARGS" in exec_start
    assert f"EnvironmentFile=-{sf.KUBEADM_FLAGS}" in sf.TEN_KUBEADM
    assert f"EnvironmentFile=-{sf.DEFAULT_KUBELET}" in sf.TEN_KUBEADM
    assert f"KUBELET_EXTRA_ARGS=--config-dir={sf.CONFIG_DIR}\n" == sf.DEFAULT_KUBELET_TEXT
    assert sf.LAB_DROPIN.startswith(sf.CONFIG_DIR + "/")
    assert parse_config(sf.LAB_DROPIN_TEXT)["failCgroupV1"] is False
    kubeconfig = yaml.safe_load(sf.kubelet_kubeconfig("https://10.0.0.1:6443", b"CA"))
    user = kubeconfig["users"][0]["user"]
    assert user["client-certificate"] == user["client-key"]
    assert user["client-certificate"].startswith(sf.KUBELET_PKI + "/")
    cni = json.loads(sf.cni_config(sdnode.POD_SUBNET))
    assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": sdnode.POD_SUBNET}]]


def test_nspawn_runs_unregistered_in_the_labs_netns_with_the_labs_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "containerd-upstream" / "containerd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    real = components.argv_for
    monkeypatch.setattr(
        components,
        "argv_for",
        lambda name, *a, **k: (
            components.Spec(name, (str(fake),)) if name == "containerd" else real(name, *a, **k)
        ),
    )
    node = sdnode.SystemdNode(Paths(tmp_path / "root", tmp_path / "run"))
    argv = sdnode_run.nspawn_argv(node)
    for flag in ("--boot", "--register=no", "--keep-unit", "--console=pipe", "--capability=all"):
        assert flag in argv
    assert f"--network-namespace-path=/run/netns/{sdnode.NETNS}" in argv
    assert f"--directory={node.rootfs}" in argv
    # containerd is the one the lab's own nodes run (one place decides), its shim beside it
    assert f"--bind-ro={fake}:/usr/bin/containerd" in argv
    assert (
        f"--bind-ro={fake.parent / 'containerd-shim-runc-v2'}:/usr/bin/containerd-shim-runc-v2"
        in argv
    )
    assert f"--bind-ro={node.paths.bin / 'crictl'}:/usr/bin/crictl" in argv
    assert all(a.startswith("--") for a in argv[1:])
    assert len(sdnode.VETH_HOST) <= 15 and len(sdnode.VETH_NODE) <= 15


def test_the_nodes_addresses_are_its_own() -> None:
    taken = {n.host_ip for n in layout.nodes(layout.MAX_NODES)}
    taken |= {n.proxy_ip for n in layout.nodes(layout.MAX_NODES)}
    assert sdnode.HOST_IP not in taken and sdnode.NODE_IP not in taken
    assert layout.node_index(sdnode.NAME) is None  # never taken for one of nodes 2..N
    subnets = {n.pod_subnet for n in layout.nodes(layout.MAX_NODES)}
    assert sdnode.POD_SUBNET not in subnets


def test_lab_state_records_the_systemd_node_and_reads_older_states(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "root", tmp_path / "run")
    paths.root.mkdir()
    LabState(systemd_node=True).save(paths)
    loaded = LabState.load(paths)
    assert loaded is not None and loaded.systemd_node is True
    paths.state_file.write_text(json.dumps({"ports": {}, "nodes": 1}))
    older = LabState.load(paths)
    assert older is not None and older.systemd_node is False


def test_the_image_key_follows_what_is_in_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    key = sdnode_image.image_key()
    assert key.startswith(sdnode_image.SUITE + "-")
    monkeypatch.setattr(sdnode_image, "PACKAGES", (*sdnode_image.PACKAGES, "vim"))
    assert sdnode_image.image_key() != key
    monkeypatch.setattr(sdnode_image, "IMAGE_REVISION", sdnode_image.IMAGE_REVISION + 1)
    assert sdnode_image.image_key() != key


def test_a_process_that_is_not_a_container_init_is_never_taken_for_one() -> None:
    assert not sdnode_run._is_container_init(os.getpid())
    assert not sdnode_run._is_container_init(1)  # this machine's PID 1 has no parent pidns
