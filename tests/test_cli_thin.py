"""Issue 12: the sweep's tables behind a typed store API, no SQL above the store, and the CLI's
commands thin (parse, call one use-case, render)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from abtest.store.db import Store
from abtest.store.tables import ArmRow

ROOT = Path(__file__).resolve().parent.parent
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "r.sqlite") as s:
        yield s


def _run(store: Store, run_id: str = "r1", node: str = "n1") -> str:
    store.insert(
        "runs",
        {"id": run_id, "kind": "sweep", "created_at": "t", "status": "running", "node_name": node},
    )
    return run_id


def test_no_module_of_experiment_holds_sql_or_names_a_table() -> None:
    offenders = []
    for path in sorted((ROOT / "abtest" / "experiment").glob("*.py")):
        text = path.read_text()
        if SQL.search(text) or re.search(r"store\.(insert|update|query|frame)\(", text):
            offenders.append(path.name)
    assert offenders == []


def test_visits_begin_applied_failed_finish(store: Store) -> None:
    run_id = _run(store)
    vid = store.visits.begin(run_id, node="n1", block=0, position=1, arm="+x")
    store.visits.applied(
        vid,
        restart_to_healthz_s=1.0,
        restart_to_ready_s=2.0,
        restart_to_verified_s=3.5,
        verified={"featureGates.X": {"expected": True}},
        config_sha256="abc",
    )
    store.visits.finish(vid)
    other = store.visits.begin(run_id, node="n1", block=0, position=2, arm="+y")
    store.visits.failed(other, "healthz: down")
    rows = {r["id"]: r for r in store.query("SELECT * FROM visits")}
    assert rows[vid]["applied"] == 1 and rows[vid]["restart_to_verified_s"] == 3.5
    assert rows[vid]["config_sha256"] == "abc" and rows[vid]["finished_at"]
    assert '"expected": true' in rows[vid]["verified_json"]
    assert rows[other]["applied"] == 0 and rows[other]["error"] == "healthz: down"
    # only applied visits count as restart history, newest first
    assert store.visits.restart_times("n1") == [3.5]
    assert store.visits.restart_times("n2") == []


def test_arms_add_fail_failed(store: Store) -> None:
    run_id = _run(store)
    store.arms.add(
        run_id,
        [ArmRow("baseline", (), {}), ArmRow("+x", {"x"}, {"featureGates.X": True})],
    )
    assert store.arms.failed(run_id) == {}
    store.arms.fail(run_id, "+x", "rolled back")
    assert store.arms.failed(run_id) == {"+x": "rolled back"}
    frame = store.arms_frame(run_id).set_index("name")
    assert frame.loc["+x", "on_json"] == '["x"]'
    assert frame.loc["baseline", "status"] == "ok"


def test_runs_reopen_describe_and_plan_entries(store: Store) -> None:
    run_id = _run(store)
    store.update("runs", {"id": run_id}, {"status": "failed", "stop_reason": "boom"})
    store.runs.reopen(run_id)
    store.runs.describe(run_id, catalog="lab", design="gates-all", seed=7)
    assert store.runs.plan(run_id) == {}
    store.runs.set_plan_entry(run_id, "a", {"b": 1})
    store.runs.set_plan_entry(run_id, "c", 2)
    row = store.run_row(run_id)
    assert (row["status"], row["stop_reason"], row["design"], row["seed"]) == (
        "running",
        None,
        "gates-all",
        7,
    )
    assert store.runs.plan(run_id) == {"a": {"b": 1}, "c": 2}


def _function_lengths(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    return {
        n.name: (n.end_lineno or n.lineno) - n.lineno + 1
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef)
    }
