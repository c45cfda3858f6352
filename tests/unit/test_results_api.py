"""`abtest.open_results`: the stored runs, rounds and pods as frames and the comparisons as
dataclasses, on a database written by the real store API (new_run, arms, visits,
record_round), tested like the CLI: the same numbers as `abtest report` and `abtest runs`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import abtest
from abtest.batch.record import record_round
from abtest.batch.round_records import PodRecord, RoundResult, Summary
from abtest.batch.run_record import finish_run, new_run
from abtest.errors import UserError
from abtest.stats import Comparison
from abtest.store.db import Store
from abtest.store.tables import ArmRow

NODE = "node-a"
SIZE = 5
BLOCKS = 4
# +fast is ~20 % faster than the baseline in every block; block-to-block drift is shared
BASE = [2.00, 2.30, 1.90, 2.10]
FAST = [1.61, 1.83, 1.53, 1.69]


def _round(ready: float, wall: float) -> RoundResult:
    latencies = tuple(ready * (0.5 + 0.1 * i) for i in range(SIZE))
    pods = [
        PodRecord(f"p{i}", sent_s=0.01 * i, response_s=0.02 + 0.01 * i, ready_s=lat + 0.01 * i)
        for i, lat in enumerate(latencies)
    ]
    summary = Summary(
        size=SIZE,
        pods_ready=SIZE,
        latencies_s=latencies,
        p50_s=float(np.median(latencies)),
        p95_s=max(latencies),
        p99_s=max(latencies),
        mean_s=float(np.mean(latencies)),
        batch_ready_s=ready,
        submit_rate=500.0,
        restarts=0,
        ready_regressions=0,
        create_failures=0,
        create_retries=0,
    )
    return RoundResult(
        node_name=NODE,
        namespace="abtest",
        size=SIZE,
        round_tag="t",
        started_wall=wall,
        accepted=True,
        reason=None,
        summary=summary,
        pods=pods,
        events=[],
        metric_deltas=[],
        sandbox_failures=0,
        timed_out=False,
        watch_restarts=0,
        watch_relisted=0,
        client_cpu_s=0.01,
        process_cpu_s=0.02,
        cleanup_s=1.0,
        cleanup_api_s=0.5,
        cleanup_ok=True,
        cleanup_note=None,
        sandbox_baseline=0,
        sandbox_after=0,
        qps=1000.0,
        concurrency=150,
        timeout_s=300.0,
        observe_s=1.0,
    )


def _sweep(store: Store, times: dict[str, list[float]], run_id: str) -> str:
    run_id = new_run(store, "sweep", node_name=NODE, command="test", run_id=run_id)
    store.runs.describe(run_id, catalog="lab", design="gates-all", seed=1)
    store.arms.add(
        run_id,
        [ArmRow(arm, [] if arm == "baseline" else [arm[1:]], {}) for arm in times],
    )
    wall = 1_764_583_200.0
    for block in range(BLOCKS):
        for position, (arm, ready) in enumerate(times.items()):
            visit = store.visits.begin(run_id, node=NODE, block=block, position=position, arm=arm)
            store.visits.applied(
                visit,
                restart_to_healthz_s=1.0,
                restart_to_ready_s=2.0,
                restart_to_verified_s=3.0,
                verified={},
                config_sha256="x",
            )
            wall += 30
            record_round(
                store, run_id, _round(ready[block], wall), arm=arm, block=block, visit_id=visit
            )
            store.visits.finish(visit)
    finish_run(store, run_id, "finished", None)
    return run_id


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        _sweep(store, {"baseline": BASE}, "sweep-2")
        time.sleep(0.02)  # created_at has millisecond resolution: sweep-1 is the newest run
        _sweep(store, {"baseline": BASE, "+fast": FAST}, "sweep-1")
    return path


def test_runs_rounds_and_pods_as_frames(db: Path) -> None:
    with abtest.open_results(db) as res:
        runs = res.runs()
        assert list(runs["id"]) == ["sweep-1", "sweep-2"]
        by_id = runs.set_index("id")
        assert by_id.loc["sweep-1", "rounds"] == 2 * BLOCKS
        assert by_id.loc["sweep-1", "status"] == "finished"
        rounds = res.rounds("sweep-1")
        assert len(rounds) == 2 * BLOCKS
        got = rounds[rounds["arm"] == "+fast"].sort_values("block")["batch_ready_s"]
        assert list(got) == FAST
        pods = res.pods("sweep-1")
        assert len(pods) == 2 * BLOCKS * SIZE
        assert {"arm", "size", "block", "ready_s", "sent_s"} <= set(pods.columns)


def test_comparisons_are_the_reports_dataclasses(db: Path, tmp_path: Path) -> None:
    with abtest.open_results(db) as res:
        found = res.comparisons("sweep-1")
    ready = [c for c in found if c.metric == "batch_ready_s"]
    assert len(ready) == 1 and isinstance(ready[0], Comparison)
    c = ready[0]
    assert (c.arm, c.baseline, c.size, c.method) == ("+fast", "baseline", SIZE, "paired")
    assert c.n_pairs == BLOCKS
    expected = (1 - math.exp(np.mean(np.log(np.array(FAST) / np.array(BASE))))) * 100
    assert c.pct_reduction == pytest.approx(expected)
    assert c.pct_ci is not None and c.pct_ci[0] > 0  # faster, and the interval says so
    # the same numbers `abtest report --format json` writes
    out = tmp_path / "report"
    args = ["sweep-1", "--db", str(db), "--format", "json", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "abtest", "report", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    reported = json.loads((out / "report.json").read_text())["comparisons"]
    same = [r for r in reported if (r["arm"], r["metric"]) == ("+fast", "batch_ready_s")]
    assert len(same) == 1
    for key, value in c.to_dict().items():
        if isinstance(value, float):
            assert same[0][key] == pytest.approx(value), key
    assert same[0]["pct_ci"] == pytest.approx(list(c.pct_ci))


def test_regress_of_two_stored_runs_and_to_dict(db: Path) -> None:
    with abtest.open_results(db) as res:
        result = res.regress("sweep-2", "sweep-1", margin_pct=5.0)
        old_name = res.gate("sweep-2", "sweep-1", margin_pct=5.0)  # scripts written before
    assert old_name.to_dict() == result.to_dict()
    assert result.source.startswith("runs sweep-2")
    assert result.decisions[0].n_pairs == 0  # two runs: unpaired
    as_dict = result.to_dict()
    assert as_dict["verdict"] == result.verdict
    assert json.loads(json.dumps(as_dict)) == as_dict


def test_a_missing_database_or_run_is_a_user_error(db: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no results database"):
        abtest.open_results(tmp_path / "nothing.sqlite")
    assert not (tmp_path / "nothing.sqlite").exists()  # not created by looking
    with abtest.open_results(db) as res, pytest.raises(UserError, match="no run"):
        res.rounds("sweep-9")


def test_importing_abtest_does_not_load_pandas() -> None:
    code = "import sys, abtest; print('pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_the_documented_example_runs(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    section = doc[doc.index("# From Python") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    code = code.replace("~/.local/share/abtest/results.sqlite", str(db))
    code = code.replace('"RUN_A", "RUN_B"', '"sweep-2", "sweep-1"')
    exec(compile(code, "docs/python-api.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "+fast 5 batch_ready_s 19.7 %" in printed


def test_detail_is_what_runs_show_prints(db: Path) -> None:
    with abtest.open_results(db) as res:
        detail = res.detail("sweep-1")
    assert (detail.blocks_with_rounds, detail.sizes, detail.status) == (BLOCKS, [SIZE], "finished")
    assert {a["name"] for a in detail.arms} == {"baseline", "+fast"}
    done = subprocess.run(
        [sys.executable, "-m", "abtest", "runs", "show", "sweep-1", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(json.dumps(detail.to_dict()))
