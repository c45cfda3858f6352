"""Fleet sweeps on the real 2-node lab (issue 14): one sweep, two nodes at once.

The module brings the lab to 2 nodes (``abtest lab up --nodes 2``) and always back to 1. Each
test runs the CLI in a child process, as a user would, with a small plan (baseline and
+kubeAPIQPS, 2 blocks, 5 pods, 2 s observation) and checks both nodes' kubelet configs
byte-identical to before, read over SSH. Run under the lab lock:
``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -q -m lab
tests/lab/engine/test_fleet_lab.py -s``
(``-s`` prints the controller figures docs/scaling.md quotes).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_playbooks import quick_copy
from sweep_signal import sigterm_once_every_node_measured

from abtest.app.report import build_model
from abtest.cluster.client import connect
from abtest.cluster.pods import count_pods
from abtest.config.playbook import NodeProfile, load_profile
from abtest.node import remote_files as rf
from abtest.node.lock import NodeLock
from abtest.node.preflight import show
from abtest.node.session import NodeSession
from abtest.report import build_tables, render_markdown
from abtest.store.db import Store

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[3]
NODE2_PROFILE = "/var/lib/abtest-lab/nodes/abtest-lab-2/profile.yaml"


def _abtest(*args: str, db: Path | None = None, timeout: float = 600) -> Any:
    env = {**os.environ, "NO_COLOR": "1", **({"ABTEST_DB": str(db)} if db else {})}
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _config(profile: NodeProfile) -> bytes:
    with NodeSession(profile) as node:
        return rf.read_file(node.ssh, profile.kubelet_config_path, sudo=True)


def _write_config(profile: NodeProfile, data: bytes, *, restart: bool = False) -> None:
    with NodeSession(profile) as node:
        rf.atomic_write(node.ssh, profile.kubelet_config_path, data, sudo=True)
        if restart:  # the running kubelet then has what the file says
            node.profile_command(profile.restart_command, timeout=120)


def _wait_healthy(profile: NodeProfile, store: Store) -> None:
    deadline = time.monotonic() + 120
    while not show(profile, store=store)["healthy"]:
        assert time.monotonic() < deadline, f"{profile.node_name} not healthy again"
        time.sleep(1.0)


def _as_before(profile: NodeProfile, original: bytes, store: Store) -> None:
    assert _config(profile) == original, f"{profile.node_name}: config not byte-identical"
    state = show(profile, store=store)
    assert state["healthy"] is True, (profile.node_name, state["problems"])
    assert state["pending_change"] is None and state["lock"] is None, state
    assert state["backup_on_node"] is False
    with NodeSession(profile) as node:
        assert NodeLock(node.ssh, profile.lock_path, sudo=True).read() is None


@pytest.fixture(scope="module")
def fleet(lab_up: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The lab at 2 nodes, their profiles and original configs, a small fast playbook."""
    try:
        up = _abtest("lab", "up", "--nodes", "2", timeout=900)
        assert up.returncode == 0, up.stdout + up.stderr
        profiles = (load_profile("lab"), load_profile(NODE2_PROFILE))
        assert [p.node_name for p in profiles] == ["abtest-lab", "abtest-lab-2"]
        originals = {p.node_name: _config(p) for p in profiles}
        folder = tmp_path_factory.mktemp("fleet")
        playbook = quick_copy(folder)
        yield {"profiles": profiles, "originals": originals, "playbook": playbook}
        for p in profiles:
            assert _config(p) == originals[p.node_name], f"{p.node_name} left changed"
    finally:
        down = _abtest("lab", "up", "--nodes", "1", timeout=900)
        assert down.returncode == 0, down.stdout + down.stderr


def _sweep_args(fleet: dict[str, Any], db: Path, *extra: str, nodes: int = 2) -> list[str]:
    profiles = ["--profile", "lab", "--profile", NODE2_PROFILE][: 2 * nodes]
    return [
        "gates", "kubeAPIQPS", "--playbook", fleet["playbook"], *profiles, "--rounds", "2",
        "--sizes", "5", "--namespace", "abtest-fleet", "--db", str(db), *extra,
    ]  # fmt: skip


def _api_requests(profile: NodeProfile) -> dict[str, float]:
    """The API server's request counters: all, and those on pods."""
    cluster = connect(profile.kubeconfig)
    url = cluster.configuration.host + "/metrics"
    rest: Any = cluster.api_client.rest_client  # the kubernetes client leaves it unannotated
    resp = rest.request("GET", url, headers={})
    # kubernetes 37's response has read(); 36's (the bound abtest[history] needs) has .data
    text = (resp.read() if hasattr(resp, "read") else resp.data).decode()
    total = pods = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            value = float(line.rsplit(" ", 1)[1])
            total += value
            if 'resource="pods"' in line:
                pods += value
    return {"total": total, "pods": pods}


def _measured_sweep(fleet: dict[str, Any], tmp_path: Path, nodes: int) -> dict[str, Any]:
    """One sweep on ``nodes`` nodes; the controller's CPU, peak memory and API requests."""
    db = tmp_path / f"fleet-{nodes}.sqlite"
    before_api = _api_requests(fleet["profiles"][0])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = _abtest(*_sweep_args(fleet, db, "--json", nodes=nodes), db=db)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    after_api = _api_requests(fleet["profiles"][0])
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    rounds = sum(n["rounds"] for n in out["nodes"])
    return {
        "out": out,
        "db": db,
        "figures": {
            "nodes": nodes,
            "rounds": rounds,
            "wall_s": round(wall, 1),
            "cpu_s": round(
                (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2
            ),
            # ru_maxrss of children is the largest child's peak (KiB): this sweep's controller
            "max_rss_mib": round(after.ru_maxrss / 1024, 1),
            "api_requests": after_api["total"] - before_api["total"],
            "api_pod_requests": after_api["pods"] - before_api["pods"],
        },
    }


def test_fleet_sweep_two_nodes_finishes_with_both_configs_as_before(
    fleet: dict[str, Any], tmp_path: Path
) -> None:
    one = _measured_sweep(fleet, tmp_path, nodes=1)
    two = _measured_sweep(fleet, tmp_path, nodes=2)
    out = two["out"]
    assert out["status"] == "finished", out
    assert [n["node_name"] for n in out["nodes"]] == ["abtest-lab", "abtest-lab-2"]
    assert all(n["status"] == "finished" and n["rounds"] == 4 for n in out["nodes"]), out
    with Store(two["db"]) as store:
        for p in fleet["profiles"]:
            _as_before(p, fleet["originals"][p.node_name], store)
        rows = store.query(
            "SELECT node_name, COUNT(*) AS n, SUM(accepted) AS ok FROM rounds "
            "WHERE run_id = ? GROUP BY node_name",
            (out["run_id"],),
        )
        assert {(r["node_name"], r["n"], r["ok"]) for r in rows} == {
            ("abtest-lab", 4, 4),
            ("abtest-lab-2", 4, 4),
        }
        # each node's pods ran on that node
        pods = store.query(
            "SELECT r.node_name AS want, COUNT(*) AS n FROM pods p JOIN rounds r "
            "ON p.round_id = r.id WHERE r.run_id = ? GROUP BY r.node_name",
            (out["run_id"],),
        )
        assert {r["want"]: r["n"] for r in pods} == {"abtest-lab": 20, "abtest-lab-2": 20}
        model = build_model(store, out["run_id"])
    assert model.fleet is not None and model.fleet.nodes == ("abtest-lab", "abtest-lab-2")
    assert {nc.node for nc in model.fleet.per_node} == {"abtest-lab", "abtest-lab-2"}
    assert model.fleet.interactions and model.blocks == 4
    md = render_markdown(model)
    assert "## Per node (abtest-lab, abtest-lab-2)" in md and "(node x arm)" in md
    assert [t.key for t in build_tables(model).fleet][:2] == [
        "per-node-batch-ready",
        "node-interaction-batch-ready",
    ]
    cluster = connect(fleet["profiles"][0].kubeconfig)
    assert count_pods(cluster, "abtest-fleet", "") == 0
    figures = [one["figures"], two["figures"]]
    print("\nFLEET FIGURES " + json.dumps(figures))
    (tmp_path / "fleet-figures.json").write_text(json.dumps(figures, indent=1))


def test_one_node_refuses_its_config_both_restored_and_the_run_names_it(
    fleet: dict[str, Any], tmp_path: Path
) -> None:
    """imageGCHighThresholdPercent 70 is valid on a node whose low threshold is 60 and refused
    (kubelet does not start: high must exceed low, default low 80) on the other."""
    one, two = fleet["profiles"]
    changed = fleet["originals"]["abtest-lab"].replace(
        b"kubeAPIBurst: 100\n", b"kubeAPIBurst: 100\nimageGCLowThresholdPercent: 60\n"
    )
    assert changed != fleet["originals"]["abtest-lab"]
    catalog = tmp_path / "gc.yaml"
    catalog.write_text(
        "catalog: fleet-gc\ndescription: valid on one node only\nfactors:\n"
        "  - {name: imageGCHighThresholdPercent, kind: config_field, on: 70, off: 85,\n"
        "     summary: refused where the low threshold is 80}\n"
    )
    db = tmp_path / "refuse.sqlite"
    _write_config(one, changed)
    try:
        args = _sweep_args(fleet, db, "--fail-fast")
        args[1:2] = ["--all", "--catalog", str(catalog)]
        proc = _abtest(*args, db=db)
        with Store(db) as store:
            _as_before(one, changed, store)
            _as_before(two, fleet["originals"]["abtest-lab-2"], store)
            (run,) = store.query("SELECT status, stop_reason FROM runs")
    finally:
        _write_config(one, fleet["originals"]["abtest-lab"], restart=True)
        with Store(tmp_path / "wait.sqlite") as store:
            _wait_healthy(one, store)
    assert proc.returncode == 4, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("abtest:")]
    assert len(errors) == 1 and "node abtest-lab-2 failed" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert run["status"] == "failed" and run["stop_reason"].startswith("node abtest-lab-2 failed")


def test_sigterm_mid_fleet_sweep_restores_both_nodes(fleet: dict[str, Any], tmp_path: Path) -> None:
    db = tmp_path / "term.sqlite"
    run_id_file = tmp_path / "run-id"
    log = tmp_path / "sweep.log"
    args = _sweep_args(fleet, db, "--run-id-file", str(run_id_file))
    rc, text = sigterm_once_every_node_measured(args, db, run_id_file, log)
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    assert "Traceback" not in text
    with Store(db) as store:
        for p in fleet["profiles"]:
            _as_before(p, fleet["originals"][p.node_name], store)
        (run,) = store.query("SELECT status, stop_reason FROM runs")
    assert run["status"] == "interrupted" and "SIGTERM" in run["stop_reason"]
    cluster = connect(fleet["profiles"][0].kubeconfig)
    assert count_pods(cluster, "abtest-fleet", "") == 0


def test_a_profile_whose_node_is_not_in_the_cluster_exits_2_and_touches_nothing(
    fleet: dict[str, Any], tmp_path: Path
) -> None:
    text = (REPO / "playbooks/nodes/lab.yaml").read_text()
    ghost = tmp_path / "ghost.yaml"
    ghost.write_text(
        text.replace("node_name: abtest-lab", "node_name: abtest-lab-9")
        .replace("profile: lab", "profile: ghost")
        .replace("/kubelet/config.yaml", "/nodes/abtest-lab-9/kubelet/config.yaml")
    )
    db = tmp_path / "ghost.sqlite"
    args = _sweep_args(fleet, db)
    i = args.index("--rounds")
    proc = _abtest(*args[:i], "--profile", str(ghost), *args[i:], db=db)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("abtest:")]
    assert len(errors) == 1 and "names node abtest-lab-9, which is not in its cluster" in errors[0]
    assert "abtest-lab, abtest-lab-2" in errors[0]  # the nodes that are there
    with Store(db) as store:
        assert store.query("SELECT id FROM runs") == []
        for p in fleet["profiles"]:
            _as_before(p, fleet["originals"][p.node_name], store)
