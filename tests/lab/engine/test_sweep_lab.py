"""The sweep (`abtest gates`) against the real lab, through the real CLI in a child process.

Every test leaves the kubelet config byte-identical, the node lock free, no config backup and
the node healthy (checked in the test and again by the ``lab_node`` fixture). Run them under
the lab lock:
``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest tests/lab/engine/test_sweep_lab.py``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from lab_playbooks import quick_copy

from abtest.cluster.client import connect
from abtest.cluster.namespaces import delete_namespace
from abtest.cluster.pods import count_pods
from abtest.node.preflight import show
from abtest.store.journal import RESTORED, Journal

if TYPE_CHECKING:
    from node_fixtures import LabNode

pytestmark = pytest.mark.lab
pytest_plugins = ["node_fixtures"]  # the lab_node fixture

REPO = Path(__file__).resolve().parents[3]
Key = tuple[int, str, int, bool]  # (block, arm, size, warm-up), as the store keeps a round


# --------------------------------------------------------------------------- helpers


def _env(db: Path) -> dict[str, str]:
    return {**os.environ, "ABTEST_DB": str(db), "NO_COLOR": "1"}


def _abtest(db: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m abtest ARGS`` with this test's results database; waits for it."""
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args],
        env=_env(db),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _plan(tmp_path: Path, *flags: str) -> dict[str, Any]:
    """``abtest plan --json`` with the same flags (against a database that does not exist:
    the plan touches nothing)."""
    proc = _abtest(tmp_path / "plan-only.sqlite", "plan", "--json", *flags, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _planned_keys(plan: dict[str, Any]) -> Counter[Key]:
    """Every round the plan's schedule runs: per visit an optional warm-up round (at the
    smallest size), then each size once."""
    keys: Counter[Key] = Counter()
    for v in plan["schedule"]["visits"]:
        if v["warmup"]:
            keys[(v["block"], v["arm"], min(v["sizes"]), True)] += 1
        for size in v["sizes"]:
            keys[(v["block"], v["arm"], size, False)] += 1
    return keys


def _stored_keys(rows: list[sqlite3.Row]) -> Counter[Key]:
    return Counter((int(r["block"]), r["arm"], int(r["size"]), bool(r["warmup"])) for r in rows)


def _rounds(lab: LabNode, run_id: str) -> list[sqlite3.Row]:
    return lab.store.query("SELECT * FROM rounds WHERE run_id = ? ORDER BY id", (run_id,))


def _visits(lab: LabNode, run_id: str) -> list[sqlite3.Row]:
    return lab.store.query("SELECT * FROM visits WHERE run_id = ? ORDER BY id", (run_id,))


def _assert_node_as_before(lab: LabNode) -> None:
    """Config byte-identical (read over SSH by the node layer), node Ready + healthz ok, no
    pending journal entry, lock free, no backup left on the node."""
    assert lab.config_bytes() == lab.original, "the kubelet config is not byte-identical"
    state = show(lab.profile, store=lab.store)
    assert state["config_sha256"] == lab.original_sha256
    assert state["ready"] is True and state["healthz"] is True, state["problems"]
    assert state["healthy"] is True
    assert state["pending_change"] is None, state["pending_change"]
    assert state["lock"] is None, state["lock_holder"]
    assert state["backup_on_node"] is False
    assert Journal(lab.store).pending(lab.profile.node_name) is None
    assert all(e.state == RESTORED for e in Journal(lab.store).history(lab.profile.node_name))


def _assert_visits_verified(visits: list[sqlite3.Row], plan: dict[str, Any]) -> None:
    """Each applied visit: the arm's every value confirmed from the running kubelet (/configz,
    and the feature metric for gates), with a positive restart-to-verified time."""
    settings = {a["name"]: a["settings"] for a in plan["schedule"]["arms"]}
    for v in visits:
        assert v["applied"] == 1 and v["error"] is None, dict(v)
        assert v["restart_to_verified_s"] is not None and v["restart_to_verified_s"] > 0
        assert v["restart_to_ready_s"] is not None
        assert 0 < v["restart_to_healthz_s"] <= v["restart_to_verified_s"]
        assert v["config_sha256"]
        verified = json.loads(v["verified_json"])
        for path, value in settings[v["arm"]].items():
            assert path in verified, (v["arm"], path, verified)
            row = verified[path]
            assert row["expected"] == value and row["configz"] == value, (v["arm"], path, row)
            if path.startswith("featureGates."):
                assert row["metric"] is value, (v["arm"], path, row)


def _sweep_figures(lab: LabNode, run_id: str, wall_s: float) -> dict[str, Any]:
    """What issue 6 asks to report for a lab sweep, from the database."""
    rounds = _rounds(lab, run_id)
    visits = [v for v in _visits(lab, run_id) if v["applied"]]
    observe_s = json.loads(lab.store.run_row(run_id)["plan_json"])["generator"]["observe_s"]
    ready = [r["batch_ready_s"] for r in rounds if r["batch_ready_s"] is not None]
    cleanup = [r["cleanup_s"] for r in rounds if r["cleanup_s"] is not None]
    verified = [v["restart_to_verified_s"] for v in visits]
    return {
        "run_id": run_id,
        "wall_s": round(wall_s, 1),
        "rounds": len(rounds),
        "batch_ready_sum_s": round(sum(ready), 2),
        "batch_ready_plus_observe_plus_cleanup_sum_s": round(
            sum(ready) + observe_s * len(rounds) + sum(cleanup), 1
        ),
        "restarts_for_visits": len(visits),
        "restarts_total_with_final_restore": len(visits) + 1,
        "median_restart_to_verified_s": round(statistics.median(verified), 2),
        "median_restart_to_healthz_s": round(
            statistics.median(v["restart_to_healthz_s"] for v in visits), 2
        ),
        "median_cleanup_s": round(statistics.median(cleanup), 2),
        "median_batch_ready_s": round(statistics.median(ready), 3),
    }


@pytest.fixture()
def namespace(lab_node: LabNode) -> Iterator[str]:
    """A namespace of this test's own (the sweep creates it); deleted afterwards."""
    name = f"abtest-sw-{secrets.token_hex(4)}"
    yield name
    # not reused: no need to wait the ~5 s the namespace controller takes to finish it
    delete_namespace(connect(lab_node.profile.kubeconfig), name, wait_s=None)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Make sure a sweep child we started is gone (SIGTERM: it restores the node first)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- tests


def test_gates_all_sweep_completes_and_gives_the_node_back(
    lab_node: LabNode, namespace: str, tmp_path: Path
) -> None:
    playbook = quick_copy(tmp_path)
    flags = ("--playbook", playbook, "--rounds", "2", "--sizes", "10", "--namespace", namespace)
    plan = _plan(tmp_path, *flags)
    assert plan["schedule"]["blocks"] == 2 and plan["schedule"]["sizes"] == [10]
    arms = {a["name"] for a in plan["schedule"]["arms"]}
    assert arms == {
        "baseline",
        "+kubeAPIQPS",
        "+ContainerCheckpoint",
        "+PLEGOnDemandRelist",
        "combined",
    }
    db = lab_node.store.path
    t0 = time.monotonic()
    proc = _abtest(db, "gates", "--all", *flags, "--db", str(db), "--json", timeout=840)
    wall_s = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    run_id = out["run_id"]
    assert out["status"] == "finished"
    assert [n["status"] for n in out["nodes"]] == ["finished"]
    assert out["nodes"][0]["failed_arms"] == {}

    # the node is exactly as before
    _assert_node_as_before(lab_node)

    # the run
    run = lab_node.store.run_row(run_id)
    assert run["kind"] == "sweep" and run["status"] == "finished", dict(run)
    assert run["stop_reason"] is None and run["finished_at"]
    assert json.loads(run["plan_json"])["schedule"] == plan["schedule"]
    stored_arms = lab_node.store.query("SELECT name, status FROM arms WHERE run_id = ?", (run_id,))
    assert {(a["name"], a["status"]) for a in stored_arms} == {(a, "ok") for a in arms}

    # every planned round, once, each accepted
    rounds = _rounds(lab_node, run_id)
    planned = _planned_keys(plan)
    assert _stored_keys(rounds) == planned
    assert len(rounds) == plan["schedule"]["rounds"] == 10
    for r in rounds:
        assert r["accepted"] == 1, (r["arm"], r["size"], r["reason"])
        assert r["pods_ready"] == r["size"] and r["node_name"] == lab_node.profile.node_name
        assert r["batch_ready_s"] > 0 and r["cleanup_s"] is not None

    # one visit per planned visit, in the planned order, every one applied and verified
    visits = _visits(lab_node, run_id)
    assert [(v["block"], v["position"], v["arm"]) for v in visits] == [
        (v["block"], v["position"], v["arm"]) for v in plan["schedule"]["visits"]
    ]
    assert all(v["finished_at"] for v in visits)
    _assert_visits_verified(visits, plan)
    by_id = {v["id"]: v for v in visits}
    for r in rounds:  # each round ran at its own arm's visit
        assert (by_id[r["visit_id"]]["block"], by_id[r["visit_id"]]["arm"]) == (
            r["block"],
            r["arm"],
        )

    # no pod of the sweep is left behind
    cluster = connect(lab_node.profile.kubeconfig)
    assert count_pods(cluster, namespace, "") == 0

    figures = _sweep_figures(lab_node, run_id, wall_s)
    print("\nSWEEP FIGURES " + json.dumps(figures))
    (tmp_path / "figures.json").write_text(json.dumps(figures, indent=1))


def test_sigterm_mid_sweep_restores_then_resume_finishes_without_repeats(
    lab_node: LabNode, namespace: str, tmp_path: Path
) -> None:
    playbook = quick_copy(tmp_path)
    flags = ("--playbook", playbook, "--rounds", "2", "--sizes", "5", "--namespace", namespace)
    plan = _plan(tmp_path, *flags)
    planned = _planned_keys(plan)
    db = lab_node.store.path
    run_id_file = tmp_path / "run-id"
    log = tmp_path / "sweep.log"
    with log.open("w") as out:
        argv = ["gates", "--all", *flags, "--db", str(db), "--run-id-file", str(run_id_file)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "abtest", *argv],
            env=_env(db),
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        # wait for >= 3 stored rounds, then for the next visit's kubelet to be verified, so
        # the signal lands in the middle of a running batch (pods being created / observed)
        deadline = time.monotonic() + 600
        run_id = ""
        while True:
            assert proc.poll() is None, f"the sweep ended early:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"too slow:\n{log.read_text()[-4000:]}"
            if not run_id and run_id_file.exists():
                run_id = run_id_file.read_text().strip()
            if run_id:
                n_rounds = len(_rounds(lab_node, run_id))
                visits = _visits(lab_node, run_id)
                if n_rounds >= 3 and len(visits) > n_rounds and visits[-1]["applied"]:
                    break
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=300)
    finally:
        _stop(proc)
    text = log.read_text()
    assert rc == 128 + signal.SIGTERM, text[-4000:]
    assert "interrupted by SIGTERM; the node was restored" in text and "Traceback" not in text
    assert "restoring the original kubelet config" in text or "rolling back" in text, text[-4000:]

    # restored and healthy; the interrupted batch's pods are gone
    _assert_node_as_before(lab_node)
    cluster = connect(lab_node.profile.kubeconfig)
    assert count_pods(cluster, namespace, "") == 0
    run = lab_node.store.run_row(run_id)
    assert run["status"] == "interrupted", dict(run)
    assert run["stop_reason"] and "SIGTERM" in run["stop_reason"]
    before = [dict(r) for r in _rounds(lab_node, run_id)]
    assert len(before) >= 3
    assert len(before) < sum(planned.values()), "the signal came after the last round"
    assert not (_stored_keys(_rounds(lab_node, run_id)) - planned), "a round not in the plan"

    # resume: same schedule, only the missing rounds, then finished
    resumed = _abtest(db, "gates", "--resume", run_id, "--db", str(db), timeout=840)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"resuming {run_id}" in resumed.stderr
    _assert_node_as_before(lab_node)
    assert count_pods(cluster, namespace, "") == 0
    run = lab_node.store.run_row(run_id)
    assert run["status"] == "finished" and run["stop_reason"] is None, dict(run)

    rounds = _rounds(lab_node, run_id)
    stored = _stored_keys(rounds)
    assert set(stored) == set(planned)
    # lab-sweep has no warm-up rounds, so no key at all may repeat
    assert not plan["schedule"]["warmup"]
    repeated = {k: n for k, n in stored.items() if n > 1 and not k[3]}
    assert not repeated, f"rounds repeated by the resume: {repeated}"
    assert stored == planned
    # the rounds stored before the interruption are untouched (same ids, same values)
    assert [dict(r) for r in rounds[: len(before)]] == before
    assert all(r["accepted"] == 1 for r in rounds), [(r["arm"], r["reason"]) for r in rounds]

    # every round belongs to an applied, verified visit of its arm; the interrupted visit
    # was configured again on resume (one visit row more than the plan's visits)
    visits = _visits(lab_node, run_id)
    applied = [v for v in visits if v["applied"]]
    _assert_visits_verified(applied, plan)
    by_id = {v["id"]: v for v in visits}
    for r in rounds:
        v = by_id[r["visit_id"]]
        assert v["applied"] == 1 and (v["block"], v["arm"]) == (r["block"], r["arm"])
    done_visits = {(v["block"], v["arm"]) for v in visits if v["finished_at"]}
    assert done_visits == {(v["block"], v["arm"]) for v in plan["schedule"]["visits"]}


def test_preflight_refuses_an_unknown_factor_and_changes_nothing(
    lab_node: LabNode, namespace: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "catalog: sweep-test\n"
        "description: one real factor and one gate this kubelet does not know\n"
        "factors:\n"
        "  - {name: kubeAPIQPS, kind: config_field, on: 3, off: 50, summary: real field}\n"
        "  - {name: NoSuchGateForAbtest, kind: feature_gate, on: true, off: false,\n"
        "     summary: not a kubelet gate}\n"
    )
    db = lab_node.store.path
    proc = _abtest(
        db,
        "gates", "--all", "--playbook", "lab-sweep", "--catalog", str(catalog),
        "--rounds", "1", "--sizes", "5", "--namespace", namespace, "--db", str(db),
        timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("abtest:")]
    assert len(errors) == 1, proc.stderr
    assert "pre-flight" in errors[0] and "nothing was changed" in errors[0]
    assert "featureGates.NoSuchGateForAbtest" in errors[0]
    assert "kubeAPIQPS" not in errors[0]  # the known factor is not reported as a problem

    # nothing was touched: config, lock, journal, namespace; nothing was measured
    _assert_node_as_before(lab_node)
    assert Journal(lab_node.store).history(lab_node.profile.node_name) == []
    for table in ("visits", "rounds"):
        assert lab_node.store.query(f"SELECT COUNT(*) FROM {table}")[0][0] == 0
    for run in lab_node.store.query("SELECT status, stop_reason FROM runs"):
        assert run["status"] == "failed" and "NoSuchGateForAbtest" in run["stop_reason"]
    cluster = connect(lab_node.profile.kubeconfig)
    assert cluster.core.list_namespace(field_selector=f"metadata.name={namespace}").items == []


def test_preflight_refuses_a_round_whose_pods_cannot_all_be_scheduled(
    lab_node: LabNode, namespace: str, tmp_path: Path
) -> None:
    """lab-sweep's pods request 100m each and the lab node has 2 CPUs: a 50-pod round would
    wait out its timeout with 30 pods Pending (seen on the lab). The pre-flight refuses it,
    reading the node's allocatable from the real API server, and nothing is changed."""
    db = lab_node.store.path
    proc = _abtest(
        db,
        "gates", "--playbook", "lab-sweep", "--catalog", "lab", "ContainerCheckpoint",
        "--rounds", "1", "--sizes", "5,50", "--namespace", namespace, "--db", str(db),
        timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("abtest:")]
    assert len(errors) == 1, proc.stderr
    assert "pre-flight" in errors[0] and "nothing was changed" in errors[0]
    assert "50 x 100m = 5 CPU" in errors[0] and "at most 20 of them" in errors[0]
    _assert_node_as_before(lab_node)
    assert Journal(lab_node.store).history(lab_node.profile.node_name) == []
    assert lab_node.store.query("SELECT COUNT(*) FROM rounds")[0][0] == 0
