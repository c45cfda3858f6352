"""The lab with several nodes (issue 14): `abtest lab up --nodes N`.

Unit tests (no lab) check that every node has its own everything and that bad counts are
refused before anything is touched. The `lab` tests bring the real lab to 2 nodes in a
module fixture and always put it back to 1 node (the default lab the other tests expect).
Run them under the lab lock:
``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -q -m lab
tests/unit/lab/test_lab_multinode.py``.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from abtest.config.playbook import load_profile, parse_profile
from abtest.errors import UserError
from abtest.lab import components, control, host, kubelet_files, layout, nodes, residue
from abtest.lab.layout import Node, Paths

# --- units: each node's own everything -----------------------------------------------------


def test_node_one_is_the_single_node_lab_unchanged() -> None:
    one, paths = Node(1), Paths()
    assert one.name == layout.NODE_NAME == "abtest-lab"
    assert one.kubelet_config == paths.kubelet_config
    assert one.kubelet_dir == paths.kubelet_dir
    assert one.containerd_socket == paths.containerd_socket
    assert one.pids == paths.pids and one.bin == paths.bin and one.logs == paths.logs
    assert (one.netns, one.veth_host, one.veth_node) == (
        layout.NETNS,
        layout.VETH_HOST,
        layout.VETH_NODE,
    )
    assert (one.host_ip, one.proxy_ip) == (layout.VETH_HOST_IP, layout.NODE_PROXY_IP)
    assert (one.pod_bridge, one.pod_subnet) == (layout.POD_BRIDGE, layout.POD_SUBNET)
    assert one.port_key("kubelet") == "kubelet" and one.profile is None
    assert one.cgroup_root is None and one.pod_logs_dir is None
    # The shipped profile of node 1 names exactly these paths.
    lab = load_profile("lab")
    assert lab.node_name == one.name
    assert Path(lab.lock_path) == one.lock_path
    ports = {"kubelet": 10250, "kubelet_healthz": 10248}
    text = kubelet_files.kubelet_config_text(one, ports)
    assert "cgroupRoot" not in text and "podLogsDir" not in text
    assert f"unix://{paths.containerd_socket}" in text and "port: 10250" in text
    # a cluster DNS address inside the API server's service range, as kubeadm gives a node
    config = yaml.safe_load(text)
    assert config["clusterDNS"] == [layout.CLUSTER_DNS_IP]
    dns = ipaddress.ip_address(layout.CLUSTER_DNS_IP)
    assert dns in ipaddress.ip_network(layout.SERVICE_SUBNET)


def _owned(node: Node) -> dict[str, object]:
    return {
        "name": node.name,
        "home": node.home,
        "run": node.run,
        "bin": node.bin,
        "pids": node.pids,
        "logs": node.logs,
        "pki": node.pki,
        "kubelet_config": node.kubelet_config,
        "kubelet_kubeconfig": node.kubelet_kubeconfig,
        "containerd_dir": node.containerd_dir,
        "containerd_socket": node.containerd_socket,
        "cni": node.cni_dir,
        "bridge_sock": node.bridge_sock,
        "lock": node.lock_path,
        "profile": node.profile,
        "netns": node.netns,
        "veth_host": node.veth_host,
        "veth_node": node.veth_node,
        "host_ip": node.host_ip,
        "proxy_ip": node.proxy_ip,
        "bridge": node.pod_bridge,
        "subnet": node.pod_subnet,
        "cgroup_root": node.cgroup_root,
        "pod_logs": node.pod_logs_dir,
        "port": node.port_key("kubelet"),
        "healthz": node.port_key("kubelet_healthz"),
    }


def test_every_node_has_its_own_files_processes_ports_and_addresses() -> None:
    every = layout.nodes(layout.MAX_NODES)
    assert [n.name for n in every][:3] == ["abtest-lab", "abtest-lab-2", "abtest-lab-3"]
    for a, b in itertools.combinations(every, 2):
        da, db = _owned(a), _owned(b)
        for key in da:
            if key == "bin" and a.first:
                continue  # node 1's bin is the lab's; node i's holds only its kubelet copy
            if da[key] is not None or db[key] is not None:
                assert da[key] != db[key], (key, a.name, b.name)
    for node in every[1:]:
        assert node.home == Path("/var/lib/abtest-lab/nodes") / node.name
        assert node.profile == node.home / "profile.yaml"
        assert len(node.veth_host) <= 15 and len(node.pod_bridge) <= 15  # IFNAMSIZ
        assert layout.node_index(node.name) == node.index


def test_other_nodes_config_names_only_their_own_runtime_and_cgroup_root() -> None:
    two = Node(2)
    ports = {"kubelet_2": 10350, "kubelet_healthz_2": 10348}
    text = kubelet_files.kubelet_config_text(two, ports)
    assert "port: 10350" in text and "healthzPort: 10348" in text
    assert f"unix://{two.containerd_socket}" in text
    assert "cgroupRoot: /abtest-lab-2" in text and f"podLogsDir: {two.pod_logs_dir}" in text
    assert str(Node(1).containerd_socket) not in text
    flags = kubelet_files.kubelet_flags(two)
    assert "--hostname-override=abtest-lab-2" in flags
    assert f"--root-dir={two.kubelet_dir / 'root'}" in flags
    proxy = components.argv_for("node-proxy-netns", Paths(), ports, two)
    assert proxy.netns == two.netns and f"bind={two.proxy_ip}" in " ".join(proxy.argv)


def test_node_index_accepts_only_the_labs_names() -> None:
    assert layout.node_index("abtest-lab") == 1
    assert layout.node_index("abtest-lab-3") == 3
    for other in ("abtest-lab-1", "abtest-lab-03", "abtest-lab-x", "abtest-labs", "node-2"):
        assert layout.node_index(other) is None, other


def test_node_two_profile_is_the_shipped_one_with_node_twos_paths(tmp_path: Path) -> None:
    two, one = Node(2), Node(1)
    text = nodes.profile_text(two)
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    prof = parse_profile(path)
    lab = load_profile("lab")
    assert prof.node_name == "abtest-lab-2"
    assert Path(prof.kubelet_config_path) == two.kubelet_config
    assert Path(prof.kubelet_binary_path) == two.bin / "kubelet"
    assert prof.restart_command == f"{two.bin / 'kubelet-service'} restart"
    assert prof.status_command == f"{two.bin / 'kubelet-service'} status"
    assert str(two.logs / "kubelet.log") in (prof.log_command or "")
    assert Path(prof.lock_path) == two.lock_path
    # The same SSH door and kubeconfig as node 1 (one sshd serves every node).
    assert prof.ssh == lab.ssh and prof.kubeconfig == lab.kubeconfig
    for template in (
        prof.sandbox_count_command,
        prof.image_present_command,
        prof.stopped_sandboxes_command,
        prof.sandbox_remove_command,
    ):
        assert template and str(two.containerd_socket) in template
    for own in (one.kubelet_config, one.containerd_socket, one.logs / "kubelet.log"):
        assert str(own) not in text, own
    assert f"lock_path: {one.lock_path}\n" not in text


def test_bad_node_counts_are_refused_before_anything_is_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def touched(*_a: object, **_k: object) -> None:
        raise AssertionError("the lab was touched")

    monkeypatch.setattr(host, "require_root", touched)
    monkeypatch.setattr(control, "status", touched)
    for bad in (0, -1, layout.MAX_NODES + 1):
        with pytest.raises(UserError) as err:
            control.up(say=lambda _: None, nodes=bad)
        assert f"--nodes {bad}" in str(err.value) and str(layout.MAX_NODES) in str(err.value)


@pytest.mark.parametrize("bad", ["0", str(layout.MAX_NODES + 1)])
def test_cli_bad_node_count_exits_2_with_one_line(bad: str) -> None:
    state = Paths().state_file
    before = state.stat().st_mtime_ns if state.exists() else None
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "lab", "up", "--nodes", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = (proc.stdout + proc.stderr).strip()
    assert f"--nodes {bad}" in out and "Traceback" not in out
    assert (state.stat().st_mtime_ns if state.exists() else None) == before


def test_help_says_the_maximum_and_why() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "lab", "up", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0
    assert f"1-{layout.MAX_NODES}" in proc.stdout and "2-core" in proc.stdout


def test_hosts_lines_follow_the_node_count(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    host.add_hosts_entry(hosts, layout.nodes(3))
    lines = hosts.read_text().splitlines()
    assert lines[1:] == [f"{n.proxy_ip} {n.name} {layout.HOSTS_MARK}" for n in layout.nodes(3)]
    host.add_hosts_entry(hosts, layout.nodes(1))
    assert hosts.read_text() == f"127.0.0.1 localhost\n10.251.0.2 abtest-lab {layout.HOSTS_MARK}\n"
    host.remove_hosts_entry(hosts)
    assert hosts.read_text() == "127.0.0.1 localhost\n"


def test_cgroup_root_is_made_in_every_hierarchy_with_the_parents_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cgroup"
    for name in ("cpuset", "memory", "unmounted"):
        (root / name).mkdir(parents=True)
    (root / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    # A real cpuset cgroup is created with empty cpus/mems files; a tmp dir has none.
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *a: Any, **k: Any) -> None:
        real_mkdir(self, *a, **k)
        if self.parent.name == "cpuset":
            (self / "cpuset.cpus").write_text("\n")
            (self / "cpuset.mems").write_text("\n")

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(host, "is_mount_point", lambda p: p.name != "unmounted")
    host.make_cgroup_root("/abtest-lab-2", root)
    assert (root / "cpuset" / "abtest-lab-2" / "cpuset.cpus").read_text() == "0-1\n"
    assert (root / "cpuset" / "abtest-lab-2" / "cpuset.mems").read_text() == "0\n"
    assert (root / "memory" / "abtest-lab-2").is_dir()
    assert not (root / "unmounted" / "abtest-lab-2").exists()
    (root / "memory" / "abtest-lab-2" / "kubepods" / "pod1").mkdir(parents=True)
    host.remove_kubepods_cgroups(("/abtest-lab-2",), root)
    assert not (root / "memory" / "abtest-lab-2").exists()


def test_stale_node_objects_are_the_lab_nodes_beyond_the_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listed = {
        "items": [
            {"metadata": {"name": n}}
            for n in ("abtest-lab", "abtest-lab-2", "abtest-lab-3", "someone-else")
        ]
    }
    monkeypatch.setattr(components, "api_get", lambda *a: listed)
    assert nodes.stale_node_objects(Paths(), {}, 1) == ["abtest-lab-2", "abtest-lab-3"]
    assert nodes.stale_node_objects(Paths(), {}, 2) == ["abtest-lab-3"]
    assert nodes.stale_node_objects(Paths(), {}, 3) == []


def test_residue_recognises_every_nodes_links() -> None:
    for name in ("abtlab0", "abtlab3", "abtlab-br0", "abtlab-br2"):
        assert residue.LINK.fullmatch(name), name
    for name in ("eth0", "abtlab", "abtlab-brx", "xabtlab0"):
        assert not residue.LINK.fullmatch(name), name


# --- on the real lab: two nodes ------------------------------------------------------------


def _abtest(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args], capture_output=True, text=True, timeout=timeout
    )


def _status() -> dict[str, Any]:
    return dict(json.loads(_abtest("lab", "status", "--json").stdout))


def _node_names() -> set[str]:
    paths = Paths()
    state = layout.LabState.load(paths)
    assert state is not None
    listed = components.api_get(paths, state.ports, "/api/v1/nodes")
    return {item["metadata"]["name"] for item in listed["items"]}


@pytest.fixture(scope="module")
def two_nodes(lab_up: None) -> Iterator[dict[str, Any]]:
    try:
        t0 = time.monotonic()
        proc = _abtest("lab", "up", "--nodes", "2")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        print(f"lab up --nodes 2 from 1 node: {time.monotonic() - t0:.1f} s")
        yield _status()
    finally:
        back = _abtest("lab", "up", "--nodes", "1")
        assert back.returncode == 0, back.stdout + back.stderr


@pytest.mark.lab
def test_status_lists_both_nodes_with_their_profiles_and_health(
    two_nodes: dict[str, Any],
) -> None:
    st = two_nodes
    assert st["up"] is True and st["ready"] is True
    listed = {n["name"]: n for n in st["nodes"]}
    assert set(listed) == {"abtest-lab", "abtest-lab-2"}
    assert listed["abtest-lab"]["profile"] == nodes.SHIPPED_PROFILE
    two = Node(2)
    assert listed["abtest-lab-2"]["profile"] == str(two.profile)
    for node in listed.values():
        assert node["ready"] is True and node["healthy"] is True, node
    pids = {n: {c: v["pid"] for c, v in node["components"].items()} for n, node in listed.items()}
    for comp in components.NODE_COMPONENTS:
        assert pids["abtest-lab"][comp] != pids["abtest-lab-2"][comp], comp
    assert {"abtest-lab", "abtest-lab-2"} <= _node_names()
    prof = load_profile(str(two.profile))
    assert prof.node_name == "abtest-lab-2"
    assert Path(prof.kubelet_config_path).read_text().count("cgroupRoot: /abtest-lab-2") == 1
    # A second `up --nodes 2` changes nothing.
    again = _abtest("lab", "up", "--nodes", "2")
    assert again.returncode == 0 and "already up" in again.stdout, again.stdout + again.stderr
    assert {n["name"]: n["components"]["kubelet"]["pid"] for n in _status()["nodes"]} == {
        n: p["kubelet"] for n, p in pids.items()
    }


@pytest.mark.lab
def test_restarting_node_two_does_not_disturb_a_batch_on_node_one(
    two_nodes: dict[str, Any],
) -> None:
    two = Node(2)
    prof = load_profile(str(two.profile))
    before = nodes.node_status(two, layout.LabState.load(Paths()).ports, True)  # type: ignore[union-attr]
    batch = subprocess.Popen(
        [sys.executable, "-m", "abtest", "batch", "--profile", "lab", "--pods", "10", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)  # the batch is under way (its pods are being created and started)
        restarts = 0
        while batch.poll() is None and restarts < 3:
            subprocess.run(shlex.split(prof.restart_command), check=True, timeout=60)
            restarts += 1
            time.sleep(2)
        out, err = batch.communicate(timeout=600)
    finally:
        if batch.poll() is None:
            batch.terminate()
            batch.wait(60)
    assert batch.returncode == 0, out + err
    result = json.loads(out)
    assert restarts >= 1, "the batch ended before node 2 was restarted"
    assert result["accepted"] is True, result
    ports = layout.LabState.load(Paths()).ports  # type: ignore[union-attr]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        after = nodes.node_status(two, ports, True)
        if after.ready and all(after.healthy.values()):
            break
        time.sleep(1)
    assert after.ready and all(after.healthy.values()), after
    assert after.running["kubelet"] != before.running["kubelet"]  # really restarted
    assert after.running["containerd"] == before.running["containerd"]


@pytest.mark.lab
def test_a_batch_runs_on_node_two_through_its_own_containerd(
    two_nodes: dict[str, Any],
) -> None:
    two, one = Node(2), Node(1)
    proc = _abtest(
        "batch",
        "--profile",
        str(two.profile),
        "--pods",
        "5",
        "--namespace",
        "abtest-node2",
        "--json",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["accepted"] is True, result
    crictl = str(Paths().bin / "crictl")

    def sandboxes(node: Node) -> str:
        return subprocess.run(
            [
                crictl,
                "--runtime-endpoint",
                f"unix://{node.containerd_socket}",
                "pods",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    # Node 1's containerd never saw node 2's pods (its GC could not touch them).
    assert "abtest-node2" not in sandboxes(one)


@pytest.mark.lab
def test_down_removes_every_node_and_up_leaves_one_without_stale_node_objects(
    two_nodes: dict[str, Any],
) -> None:
    two = Node(2)
    try:
        down = _abtest("lab", "down")
        assert down.returncode == 0, down.stdout + down.stderr
        st = _status()
        assert st["up"] is False and st["left_behind"] == [], st["left_behind"]
        assert not Path("/run/netns", two.netns).exists()
        assert not Path("/sys/class/net", two.veth_host).exists()
    finally:
        up = _abtest("lab", "up")
        assert up.returncode == 0, up.stdout + up.stderr
    st = _status()
    assert st["up"] and st["ready"] and [n["name"] for n in st["nodes"]] == ["abtest-lab"]
    assert _node_names() == {"abtest-lab"}
    assert not two.home.exists() and not two.run.exists()
    assert "abtest-lab-2" not in host.HOSTS.read_text()


@pytest.mark.lab
def test_up_one_after_three_leaves_one_node_and_touches_nothing_of_node_one(
    two_nodes: dict[str, Any],
) -> None:
    def kubelet_pid() -> int:
        return int(_status()["nodes"][0]["components"]["kubelet"]["pid"])

    first = kubelet_pid()
    three = _abtest("lab", "up", "--nodes", "3")
    assert three.returncode == 0, three.stdout + three.stderr
    st = _status()
    assert [(n["name"], n["ready"], n["healthy"]) for n in st["nodes"]] == [
        ("abtest-lab", True, True),
        ("abtest-lab-2", True, True),
        ("abtest-lab-3", True, True),
    ]
    assert _node_names() == {"abtest-lab", "abtest-lab-2", "abtest-lab-3"}
    one = _abtest("lab", "up", "--nodes", "1")
    assert one.returncode == 0, one.stdout + one.stderr
    st = _status()
    assert st["up"] and st["ready"] and [n["name"] for n in st["nodes"]] == ["abtest-lab"]
    assert _node_names() == {"abtest-lab"}
    assert kubelet_pid() == first  # node 1 was never restarted
    for node in (Node(2), Node(3)):
        assert not node.home.exists() and not node.run.exists()
        assert not Path("/run/netns", node.netns).exists()
        assert not Path("/sys/class/net", node.pod_bridge).exists()
        assert node.name not in host.HOSTS.read_text()
        assert not any((c / node.name).exists() for c in host.CGROUP_ROOT.iterdir())


def test_a_kept_kubelet_config_without_cluster_dns_is_named_at_up(tmp_path: Path) -> None:
    """`up` never rewrites a kept kubelet config; one from before the cluster DNS address is
    named, with the command that gives the node one."""
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    one, two = Node(1, paths), Node(2, paths)
    assert kubelet_files.kept_config_notes(one) == []  # no config yet: up writes a fresh one
    ports = {
        "kubelet": 10250,
        "kubelet_healthz": 10248,
        two.port_key("kubelet"): 10260,
        two.port_key("kubelet_healthz"): 10258,
    }
    for node in (one, two):
        node.kubelet_config.parent.mkdir(parents=True)
    one.kubelet_config.write_text(kubelet_files.kubelet_config_text(one, ports))
    assert kubelet_files.kept_config_notes(one) == []
    old = kubelet_files.kubelet_config_text(two, ports).replace(
        f"clusterDNS: [{layout.CLUSTER_DNS_IP}]\n", ""
    )
    two.kubelet_config.write_text(old)
    (note,) = kubelet_files.kept_config_notes(two)
    assert note.startswith(f"{two.name}: ") and "MissingClusterDNS" in note
    assert "abtest lab down --purge && abtest lab up" in note
    # an empty list is no cluster DNS either; a file that does not parse is the kubelet's to name
    two.kubelet_config.write_text(old + "clusterDNS: []\n")
    assert len(kubelet_files.kept_config_notes(two)) == 1
    two.kubelet_config.write_text("clusterDNS: [\n")
    assert kubelet_files.kept_config_notes(two) == []
