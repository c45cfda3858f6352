"""Issue 35: an export file is untrusted input. Every row below is a crafted or malformed
`abtest runs import` file, run through the real entry point: one error line per refused
value naming the file and the JSON path, exit 2, no traceback, and the target database
(holding another run, the "victim") exactly as it was: every row of every table the same.
The last tests prove the same on PostgreSQL, and that a good import never touches a stored
run either."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bad_input import Case, invoke, run_case
from history_store import add_runs

from abtest.store.db import Store
from abtest.store.transfer import export_runs

Doc = dict[str, Any]
TABLES = ("runs", "arms", "visits", "rounds", "pods", "events", "metric_deltas", "round_gaps")


def dump(location: str | Path) -> str:
    """Every row of every table a run owns, in one fixed order: the database's state."""
    out = {}
    with Store(location) as store:
        for table in TABLES:
            rows = [
                [None if v is None else repr(v) for v in row]
                for row in store.query(f"SELECT * FROM {table}")
            ]
            out[table] = sorted(json.dumps(r) for r in rows)
    return json.dumps(out, sort_keys=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Doc:
    """A good export of one realistic run (arms, visits, rounds, pods, metric deltas, gaps,
    an event), as `abtest runs export` writes it."""
    folder = tmp_path_factory.mktemp("source")
    with Store(folder / "from.sqlite") as store:
        add_runs(store, [5.0], rounds=3)
        store.insert(  # an event too, so every table a round owns has a row
            "events", {"round_id": 1, "pod": "p0", "reason": "Pulled", "message": "m", "type": "N"}
        )
        doc = export_runs(store)
    parsed: Doc = json.loads(json.dumps(doc, sort_keys=True, default=str))
    return parsed


@pytest.fixture()
def target(tmp_path: Path) -> Path:
    """A database holding another run only (the one a crafted file would change)."""
    db = tmp_path / "target.sqlite"
    with Store(db) as store:
        add_runs(store, [7.0], rounds=2, seed=2)
    return db


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    """A change to one place of the document: ``runs.0.rounds.3.batch_ready_s``."""

    def change(doc: Doc) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return change


def _pop(path: str) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[last]

    return change


def _dup_arm(doc: Doc) -> None:
    doc["runs"][0]["arms"].append(dict(doc["runs"][0]["arms"][0]))


def _dup_pod(doc: Doc) -> None:
    pods = doc["runs"][0]["rounds"][0]["pods"]
    pods.append(dict(pods[0]))


def _dup_run(doc: Doc) -> None:
    doc["runs"].append(copy.deepcopy(doc["runs"][0]))


INJECTION = "node_name, status) VALUES ('x', 'y'); UPDATE runs SET status = 'pwned'; --"
RUN = "runs[0].run"
R0 = "runs[0].rounds[0]"

# (id, change to the good export, words the first error line holds)
DOC_CASES: list[tuple[str, Callable[[Doc], None], tuple[str, ...]]] = [
    ("runs-a-string", _set("runs", "abc"), ("bad.json", "runs:", "must be an array")),
    ("runs-null-item", _set("runs", [None]), ("runs[0]:", "must be an object, not null")),
    ("runs-item-a-number", _set("runs", [3]), ("runs[0]:", "must be an object")),
    ("arms-a-string", _set("runs.0.arms", "x"), ("runs[0].arms:", "must be an array")),
    ("duplicate-arm", _dup_arm, ("runs[0].arms[", ".name", "already at runs[0].arms[0].name")),
    ("duplicate-pod", _dup_pod, (f"{R0}.pods[", "already at")),
    ("duplicate-run", _dup_run, ("runs[1].run.id", "already at runs[0].run.id")),
    ("unknown-column", _set("runs.0.rounds.0.surprise", 1), (f"{R0}.surprise", "not a column")),
    ("sql-in-a-column-name", _set(f"runs.0.run.{INJECTION}", 1),
     (RUN, "not a column of table runs")),
    ("newline-in-a-column-name", _set("runs.0.run.a\nb", 1), (RUN, "'a\\nb'", "not a column")),
    ("null-in-a-required-column", _set("runs.0.rounds.0.size", None), (f"{R0}.size", "is null")),
    ("missing-required-column", _pop("runs.0.rounds.0.arm"), (f"{R0}.arm", "is missing")),
    ("dangling-visit", _set("runs.0.rounds.0.visit_id", 999),
     (f"{R0}.visit_id", "not in this run")),
    ("dangling-arm", _set("runs.0.rounds.0.arm", "ghost"),
     (f"{R0}.arm", "not among this run's arms")),
    ("rows-of-another-run", _set("runs.0.rounds.0.run_id", "20990101-000000-other"),
     (f"{R0}.run_id", "not this run's id")),
    ("text-in-a-number-column", _set("runs.0.rounds.2.batch_ready_s", "slow"),
     ("runs[0].rounds[2].batch_ready_s", "must be a number, not a string")),
    ("nan", _set("runs.0.rounds.0.p50_s", float("nan")), (f"{R0}.p50_s", "finite")),
    ("infinity", _set("runs.0.rounds.0.batch_ready_s", float("inf")),
     (f"{R0}.batch_ready_s", "finite")),
    ("negative-seconds", _set("runs.0.rounds.0.batch_ready_s", -1.0),
     (f"{R0}.batch_ready_s", "outside")),
    ("size-zero", _set("runs.0.rounds.0.size", 0), (f"{R0}.size", "outside")),
    ("bool-in-an-integer-column", _set("runs.0.rounds.0.accepted", True),
     (f"{R0}.accepted", "integer")),
    ("float-in-an-integer-column", _set("runs.0.rounds.0.block", 1.5), (f"{R0}.block", "integer")),
    ("integer-beyond-64-bits", _set("runs.0.run.seed", 10**30), (f"{RUN}.seed", "64-bit")),
    ("number-in-a-text-column", _set("runs.0.run.command", 5),
     (f"{RUN}.command", "must be a string")),
    ("nul-in-text", _set("runs.0.run.command", "a\x00b"), (f"{RUN}.command", "nul")),
    ("run-id-with-dotdot", _set("runs.0.run.id", "../../etc"), (f"{RUN}.id", "not a valid run id")),
    ("run-id-with-slash", _set("runs.0.run.id", "a/b"), (f"{RUN}.id", "not a valid run id")),
    ("run-id-trailing-newline", _set("runs.0.run.id", "r1\n"), (f"{RUN}.id", "run id")),
    ("run-id-empty", _set("runs.0.run.id", ""), (f"{RUN}.id", "run id")),
    ("node-name-with-slash", _set("runs.0.run.node_name", "../n"),
     (f"{RUN}.node_name", "node name")),
    ("node-name-control-char", _set("runs.0.rounds.0.node_name", "n\x1b[1m"),
     (f"{R0}.node_name", "node name")),
    ("arm-name-with-slash", _set("runs.0.arms.0.name", "a/b"),
     ("runs[0].arms[0].name", "arm name")),
    ("pod-name-trailing-newline", _set("runs.0.rounds.0.pods.0.name", "p\n"),
     (f"{R0}.pods[0].name", "pod name")),
    ("round-id-in-a-child-row", _set("runs.0.rounds.0.pods.0.round_id", 1),
     (f"{R0}.pods[0].round_id", "set by the import")),
    ("plan-not-an-object", _set("runs.0.run.plan_json", "[1]"), (f"{RUN}.plan_json", "object")),
    ("plan-not-json", _set("runs.0.run.plan_json", "{junk"), (f"{RUN}.plan_json", "not json")),
    ("plan-with-nan", _set("runs.0.run.plan_json", '{"a": NaN}'), (f"{RUN}.plan_json", "nan")),
    ("arm-factors-not-a-list", _set("runs.0.arms.0.on_json", "5"),
     ("runs[0].arms[0].on_json", "array")),
    ("created-at-not-a-time", _set("runs.0.run.created_at", "yesterday"),
     (f"{RUN}.created_at", "iso 8601")),
    ("top-level-an-array", lambda d: None, ()),  # replaced below: the document is []
    ("wrong-format", _set("format", "other"), ("format:", "abtest-runs")),
    ("schema-newer", _set("schema", 99), ("schema:", "upgrade abtest")),
    ("schema-a-string", _set("schema", "4"), ("schema:", "schema version")),
    ("unknown-top-level-key", _set("extra", 1), ("extra", "not a key")),
]  # fmt: skip


def _bad_json(case_id: str, change: Callable[[Doc], None], doc: Doc) -> str:
    if case_id == "top-level-an-array":
        return "[]"
    bad = copy.deepcopy(doc)
    change(bad)
    return json.dumps(bad)


@pytest.mark.parametrize(("case_id", "change", "words"), DOC_CASES, ids=[c[0] for c in DOC_CASES])
def test_a_malformed_export_is_refused_and_changes_nothing(
    case_id: str,
    change: Callable[[Doc], None],
    words: tuple[str, ...],
    source: Doc,
    target: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = dump(target)
    if case_id == "top-level-an-array":
        words = ("top level", "must be an object, not an array")
    case = Case(
        case_id,
        ("runs", "import", "bad.json", "--db", str(target)),
        ("bad.json", *words),
        files={"bad.json": _bad_json(case_id, change, source)},
    )
    result = run_case(case, tmp_path, capsys)
    assert all(line.startswith("abtest: error: bad.json: ") for line in result.err.splitlines())
    assert dump(target) == before, "a refused import changed the database"


FILE_CASES = [
    Case("invalid-json", ("runs", "import", "bad.json"), ("bad.json", "is not json", "line 1"),
         files={"bad.json": '{"format": "abtest-runs", "runs": [}'}),
    Case("not-utf8", ("runs", "import", "bad.json"), ("bad.json", "not utf-8"),
         files={"bad.json": b'{"format": "\xff\xfe"}'}),
    Case("nested-too-deep", ("runs", "import", "bad.json"),
         ("bad.json", "not json this tool reads"),
         files={"bad.json": "[" * 200_000 + "]" * 200_000}),
    Case("a-huge-number-literal", ("runs", "import", "bad.json"), ("bad.json", "not json"),
         files={"bad.json": '{"schema": ' + "9" * 5000 + "}"}),
    Case("missing-file", ("runs", "import", "nope.json"), ("nope.json", "cannot read")),
    Case("a-folder", ("runs", "import", "dir"), ("dir", "not a regular file"),
         files={"dir/x": "x"}),
    Case("empty-file", ("runs", "import", "bad.json"), ("bad.json", "not json"),
         files={"bad.json": ""}),
]  # fmt: skip


@pytest.mark.parametrize("case", FILE_CASES, ids=[c.id for c in FILE_CASES])
def test_an_unreadable_export_is_one_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], target: Path
) -> None:
    before = dump(target)
    run_case(
        Case(case.id, (*case.args, "--db", str(target)), case.words, case.files), tmp_path, capsys
    )
    assert dump(target) == before


def test_a_huge_file_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: Path
) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:  # sparse: 300 MiB on paper, nothing on disk
        handle.truncate(300 * 2**20)
    case = Case("huge", ("runs", "import", "huge.json", "--db", str(target)),
                ("huge.json", "more than an import takes"))  # fmt: skip
    run_case(case, tmp_path, capsys)


def test_a_fifo_is_refused_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: Path
) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    case = Case("fifo", ("runs", "import", "pipe.json", "--db", str(target)),
                ("pipe.json", "not a regular file"))  # fmt: skip
    run_case(case, tmp_path, capsys)


def test_every_refusal_is_its_own_line(
    source: Doc, target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = copy.deepcopy(source)
    rounds = doc["runs"][0]["rounds"]
    for rnd in rounds:
        rnd["batch_ready_s"] = "slow"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    result = invoke(["runs", "import", "bad.json", "--db", str(target)], tmp_path, capsys)
    lines = result.err.splitlines()
    assert result.code == 2 and "Traceback" not in result.err
    # at most 20 values and a line saying how many more; each names its own round
    expected = min(len(rounds), 20) + (len(rounds) > 20)
    assert len(lines) == expected, result.err
    assert f"runs[0].rounds[{len(rounds) - 1}].batch_ready_s" in result.err or len(rounds) > 20


# --- a stored run is never touched: SQLite and PostgreSQL ------------------------------------


def _crafted(doc: Doc, victim: str) -> dict[str, str]:
    """Files that try to change the victim run: SQL in a key, rows naming the victim's id,
    the victim's own id with other values (a collision)."""
    injected = copy.deepcopy(doc)
    injected["runs"][0]["rounds"][0][
        "batch_ready_s) VALUES (1); UPDATE rounds SET batch_ready_s = 0; --"
    ] = 1
    injected["runs"][0]["run"][
        "node_name, status) VALUES ('a', 'b'); UPDATE runs SET node_name = 'x', status = 'y'; --"
    ] = 1
    foreign = copy.deepcopy(doc)
    for rnd in foreign["runs"][0]["rounds"]:
        rnd["run_id"] = victim
    colliding = copy.deepcopy(doc)
    colliding["runs"][0]["run"]["id"] = victim
    colliding["runs"][0]["run"]["status"] = "pwned"
    for part in ("arms", "visits", "rounds"):
        for row in colliding["runs"][0][part]:
            row["run_id"] = victim
    return {
        "injected.json": json.dumps(injected),
        "foreign.json": json.dumps(foreign),
        "colliding.json": json.dumps(colliding),
        "good.json": json.dumps(doc),
    }


def _victim_rows(location: str | Path, victim: str) -> str:
    """Every row the victim run owns, as text: compared byte for byte."""
    with Store(location) as store:
        out: dict[str, list[Any]] = {}
        for table in ("runs", "arms", "visits", "rounds"):
            key = "id" if table == "runs" else "run_id"
            out[table] = [list(r) for r in store.query(
                f"SELECT * FROM {table} WHERE {key} = ? ORDER BY 1, 2", (victim,))]  # fmt: skip
        for table in ("pods", "events", "metric_deltas", "round_gaps"):
            rows = store.query(
                f"SELECT c.* FROM {table} c JOIN rounds r ON r.id = c.round_id WHERE r.run_id = ?",
                (victim,),
            )
            out[table] = sorted(json.dumps([repr(v) for v in r]) for r in rows)
    return json.dumps(out, default=repr, sort_keys=True)


def _prove_untouched(location: str | Path, source: Doc, tmp_path: Path, capsys: Any) -> None:
    doc = source
    with Store(location) as store:
        (victim,) = add_runs(store, [7.0], rounds=2, seed=2)
    before = _victim_rows(location, victim)
    files = _crafted(doc, victim)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    for name, says in (
        ("injected.json", "not a column"),
        ("foreign.json", "not this run's id"),
        ("colliding.json", "already in"),
    ):
        result = invoke(["runs", "import", name, "--db", str(location)], tmp_path, capsys)
        assert result.code == 2 and says in result.err and "Traceback" not in result.err, result
        assert _victim_rows(location, victim) == before, f"{name} changed the stored run"
    result = invoke(["runs", "import", "good.json", "--db", str(location)], tmp_path, capsys)
    assert result.code == 0, result.err
    assert _victim_rows(location, victim) == before, "a good import changed another run"
    with Store(location) as store:
        assert {r[0] for r in store.query("SELECT id FROM runs")} == {
            victim,
            doc["runs"][0]["run"]["id"],
        }


def test_a_stored_run_is_byte_identical_after_crafted_imports_sqlite(
    source: Doc, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _prove_untouched(tmp_path / "shared.sqlite", source, tmp_path, capsys)


@pytest.mark.postgres
def test_a_stored_run_is_byte_identical_after_crafted_imports_postgres(
    source: Doc, pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _prove_untouched(pg_url, source, tmp_path, capsys)


@pytest.mark.postgres
def test_a_malformed_export_changes_nothing_on_postgres(
    source: Doc, pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file bad only in its last run: the first run is not written either (one transaction)."""
    doc = copy.deepcopy(source)
    second = copy.deepcopy(doc["runs"][0])
    second["run"]["id"] = "second-run"
    for part in ("arms", "visits", "rounds"):
        for row in second[part]:
            row["run_id"] = "second-run"
    second["rounds"][-1]["p95_s"] = "text"
    doc["runs"].append(second)
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    before = dump(pg_url)
    result = invoke(["runs", "import", "bad.json", "--db", pg_url], tmp_path, capsys)
    assert result.code == 2 and "runs[1].rounds[" in result.err and ".p95_s" in result.err
    assert dump(pg_url) == before


def test_a_run_with_junk_in_its_stored_plan_reports_in_one_line(
    source: Doc, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What an import from before these checks could plant: the report is one line."""
    db = tmp_path / "old.sqlite"
    with Store(db) as store:
        (run_id,) = add_runs(store, [5.0], rounds=3)
    for plan, code in (
        ("not json", 0),
        ("[1, 2]", 0),
        ('{"schedule": 5, "nodes": 3}', 0),
        ('{"until_resolved": {"looks": 3}}', 2),
        ('{"until_resolved": {"looks": [], "looks_taken": 1, "blocks": 1}}', 2),
    ):
        with Store(db) as store:
            store.update("runs", {"id": run_id}, {"plan_json": plan})
        for args in (["report", run_id, "-o", "rep", "-f", "json"], ["runs", "show", run_id]):
            result = invoke([*args, "--db", str(db)], tmp_path, capsys)
            assert "Traceback" not in result.err, (plan, result.err)
            assert result.code == (code if args[0] == "report" else 0), (plan, args, result)
            if result.code:
                assert len(result.err.splitlines()) == 1 and "malformed" in result.err
