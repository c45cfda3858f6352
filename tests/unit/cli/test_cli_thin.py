"""Issue 12: the sweep's tables behind a typed store API, no SQL above the store, and the CLI's
commands thin (parse, call one use-case, render)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_run import run

from abtest.app.reach import Reach
from abtest.store.db import Store
from abtest.store.tables import ArmRow

ROOT = Path(__file__).resolve().parents[3]
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "r.sqlite") as s:
        yield s


def _run(store: Store, run_id: str = "r1", node: str = "n1") -> str:
    store.insert(
        "runs",
        {"id": run_id, "kind": "sweep", "created_at": "t", "status": "running", "node_name": node},
    )
    return run_id


def test_no_module_outside_the_store_holds_sql_or_names_a_table() -> None:
    offenders = []
    paths = [p for p in (ROOT / "abtest").rglob("*.py") if "store" not in p.parts]
    assert len(paths) > 100
    for path in sorted(paths):
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


def test_cleanup_and_batch_ready_times_newest_first(store: Store) -> None:
    """The recent durations a plan estimates from (one shared read, abtest.store.tables): only
    the node's rows that have the figure (and, for batch ready, accepted at that size), newest
    first, at most ``limit``."""
    run_id = _run(store)
    rows = [  # node, size, accepted, cleanup_s, batch_ready_s
        ("n1", 10, 1, 1.0, 5.0),
        ("n1", 10, 0, None, 6.0),
        ("n1", 20, 1, 2.0, 7.0),
        ("n2", 10, 1, 9.0, 9.0),
        ("n1", 10, 1, 3.0, 8.0),
    ]
    for i, (node, size, accepted, cleanup_s, ready_s) in enumerate(rows):
        store.rounds.add(
            {
                "run_id": run_id, "node_name": node, "arm": "base", "size": size, "ordinal": i,
                "started_wall": 0.0, "accepted": accepted, "pods_ready": size,
                "cleanup_s": cleanup_s, "batch_ready_s": ready_s,
            },
            [],
        )  # fmt: skip
    assert store.rounds.cleanup_times("n1") == [3.0, 2.0, 1.0]
    assert store.rounds.cleanup_times("n1", limit=2) == [3.0, 2.0]
    assert store.rounds.batch_ready_times("n1", 10) == [8.0, 5.0]
    assert store.rounds.batch_ready_times("n2", 20) == []


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


# ------------------------------------------------------------------ one declaration per option

SHARED = ("--db", "--json", "--accept-new-host-key", "--kubeconfig", "--context", "--break-lock")


@pytest.mark.parametrize("flag", SHARED)
def test_a_shared_option_is_declared_once_in_cli_options(flag: str) -> None:
    where = {
        path.name: path.read_text().count(f'"{flag}"')
        for path in (ROOT / "abtest" / "cli").glob("*.py")
    }
    assert {name: n for name, n in where.items() if n} == {"options.py": 1}


def test_no_command_hides_a_type_behind_a_typer_default() -> None:
    """One typer style: ``x: Annotated[T, typer.Option(...)] = default`` (or an alias of it),
    never ``x: int = typer.Option(None, ...)`` where mypy sees an int that can be None."""
    old_style = re.compile(r":\s*[\w\[\], |]+\s*=\s*(typer\.(Option|Argument)\(|o\.[A-Z_]+\b)")
    for path in sorted((ROOT / "abtest" / "cli").glob("*.py")):
        assert not old_style.search(path.read_text()), path.name


# ------------------------------------------------------------------ commands call one use-case

COMMANDS = {
    "regress.py": "regress",
    "gates.py": "gates",
    "analyze.py": "analyze",
    "batch.py": "batch",
    "plan.py": "plan",
    "bisect.py": "bisect",
}


@pytest.mark.parametrize(("module", "command"), COMMANDS.items())
def test_a_command_body_only_parses_calls_and_renders(module: str, command: str) -> None:
    """The function's body (its signature is the option declarations) stays short: the work
    is in the use-case it calls."""
    tree = ast.parse((ROOT / "abtest" / "cli" / module).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == command)
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) else fn.body  # the docstring
    lines = (body[-1].end_lineno or 0) - body[0].lineno + 1
    assert lines <= 60, f"{module}:{command} body is {lines} lines"
    assert not any(isinstance(n, ast.Dict) and len(n.keys) > 3 for n in ast.walk(fn)), (
        "a result's JSON is its to_dict(), not a dict built in the command"
    )


def _rounds_csv(path: Path) -> Path:
    lines = ["arm,size,block,batch_ready_s"]
    for b, (ref, cand) in enumerate([(2.0, 2.02), (2.2, 2.2), (1.9, 1.93), (2.1, 2.1)]):
        lines += [f"ref,10,{b},{ref}", f"cand,10,{b},{cand}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_program_calls_the_gate_the_cli_calls_and_gets_the_same_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from abtest.app.regress import RegressRequest, run_regress
    from abtest.ingest.rounds import RoundsSource

    data = _rounds_csv(tmp_path / "rounds.csv")
    said: list[str] = []
    result = run_regress(
        RegressRequest(
            reference="ref",
            candidate="cand",
            rounds=RoundsSource(csv=data),
            metrics=("batch_ready_s",),
            margin_pct=5.0,
            reach=Reach(db=tmp_path / "unused.sqlite"),
        ),
        say=said.append,
    )
    assert result.verdict in ("PASS", "FAIL", "INCONCLUSIVE")
    assert result.decisions[0].n_pairs == 4
    as_dict = result.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict  # plain JSON: no NaN, no tuples
    flags = ["--reference", "ref", "--candidate", "cand", "--metric", "batch_ready_s", "--json"]
    cli = run(["regress", "--csv", str(data), *flags, "--margin", "5"], capsys, monkeypatch)
    assert cli.code == result.exit_code, cli.err
    assert json.loads(cli.out) == as_dict


def test_regress_source_choice_is_the_use_cases() -> None:
    from abtest.app.regress import RegressRequest, run_regress
    from abtest.errors import UserError

    with pytest.raises(UserError, match="choose one source"):
        run_regress(RegressRequest(), say=print)
    with pytest.raises(UserError, match="both --reference-run and --candidate-run"):
        run_regress(RegressRequest(reference_run="a"), say=print)


def test_arm_means_per_size_with_change_vs_baseline() -> None:
    import pandas as pd

    from abtest.stats.means import ArmMean, arm_means

    frame = pd.DataFrame(
        [(10, "baseline", 2.0, 1, 0), (10, "+A", 3.0, 1, 0), (10, "+A", 9.0, 0, 0)],
        columns=["size", "arm", "batch_ready_s", "accepted", "warmup"],
    )
    assert arm_means(frame) == [
        ArmMean(10, "+A", 1, 3.0, 50.0),
        ArmMean(10, "baseline", 1, 2.0, None),
    ]
    assert arm_means(frame.iloc[:0]) == []


# ------------------------------------------------------------------ gates' use-case, fake node


def test_sweep_gates_runs_resumes_and_summarises_on_a_fake_node(tmp_path: Path) -> None:
    from abtest.app.gates import GatesRequest, sweep_gates
    from abtest.config.plan_options import PlanOptions
    from abtest.errors import UserError
    from abtest.testing import FakeKit, FakeNode

    db = tmp_path / "r.sqlite"
    opts = PlanOptions(playbook="lab-sweep", rounds=2, sizes=(5,), seed=7, factors=("kubeAPIQPS",))
    node = FakeNode("abtest-lab")
    events: list[str] = []
    done = sweep_gates(
        GatesRequest(plan=opts, reach=Reach(db=db), command="test"),
        lambda kind, _data: events.append(kind),
        kit=FakeKit(node),
    )
    node.verify()
    assert events[0] == "plan" and events[-1] == "end"
    out = done.to_dict()
    assert out["status"] == "finished" and out["nodes"][0]["node_name"] == "abtest-lab"
    arms = {(m["arm"], m["size"]): m for m in out["summary"]}
    assert set(arms) == {("baseline", 5), ("+kubeAPIQPS", 5)}
    assert arms[("baseline", 5)]["rounds"] == 2 and arms[("baseline", 5)]["change_pct"] is None
    assert arms[("+kubeAPIQPS", 5)]["change_pct"] == pytest.approx(0.0)  # the fake: 1 s each
    # --resume rebuilds the plan from the run's stored options: nothing is left to run
    again = FakeNode("abtest-lab")
    resumed = sweep_gates(
        GatesRequest(resume=out["run_id"], reach=Reach(db=db)), lambda *_: None, kit=FakeKit(again)
    )
    assert resumed.sweep.run_id == out["run_id"] and resumed.sweep.status == "finished"
    assert not any(c.startswith("round") for c in again.calls)
    with pytest.raises(UserError, match="--until-resolved cannot be combined with --resume"):
        sweep_gates(
            GatesRequest(resume=out["run_id"], reach=Reach(db=db), until_resolved=True), print
        )
    with pytest.raises(UserError, match="nothing to sweep"):
        sweep_gates(GatesRequest(reach=Reach(db=tmp_path / "none.sqlite")), print)
    assert not (tmp_path / "none.sqlite").exists()  # refused before a database is made


def test_a_program_plans_as_the_cli_plans_and_gets_the_same_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plan_sweep(...).to_dict()`` is what ``abtest plan --json`` prints (no results
    database: the stated default noise on both sides)."""
    import json

    from abtest.app.plan import plan_sweep
    from abtest.config.plan_options import PlanOptions

    db = tmp_path / "none.db"
    args = ["plan", "--playbook", "lab-reference", "--json", "--detect", "10%", "--db", str(db)]
    out = run(args, capsys, monkeypatch, cwd=ROOT)
    assert out.code == 0, out.err  # was check=True
    report = plan_sweep(PlanOptions(playbook="lab-reference"), db=db, detect="10%")
    assert json.loads(out.out) == json.loads(json.dumps(report.to_dict()))
    assert report.to_dict()["kubelet_restarts"] == report.restarts
