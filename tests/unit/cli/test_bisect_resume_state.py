"""Issue 44: a stored bisection is untrusted input to ``abtest bisect --resume``. A real
bisection (the fake node of tests/bisect_fakes.py, the real search and store) is exported; each
row below changes its stored state as an attacker would, in the `abtest runs import` file or by
writing the database directly (sqlite3, psycopg: not abtest's writer), on SQLite and
PostgreSQL. The resume is refused through the real CLI with one line naming the bisection and
the field, exit 2, no traceback, before a node is reached or a run added. Then the options a
resume is given again: the stored ones are accepted, a different one is refused by name."""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bad_input import PROFILE, invoke
from bisect_fakes import FakeBuilder, SteppedKit
from pg_server import PgServer

import abtest.engine.sweep
from abtest.app.bisect import BisectRequest, run_bisect
from abtest.app.reach import Reach
from abtest.config.playbook import load_profile
from abtest.store.db import Store
from abtest.store.transfer import export_runs, import_runs
from abtest.testing import FakeNode, fake_profiles

RELEASES = ["v1.34.4", "v1.35.4", "v1.36.0", "v1.36.1", "v1.36.3"]
PROFILE_FILE = "node.yaml"
NODE_PROFILE = PROFILE + "  builds_dir: /opt/kubelets\n"
Doc = dict[str, Any]
Entries = dict[int, dict[str, Any]]  # each measurement's bisect entry, by index


@dataclass(frozen=True)
class Source:
    """A finished bisection's export: the ends FAIL, step 1 (v1.36.0) BAD, step 2 (v1.35.4)
    GOOD, culprit v1.36.0; ``runs[i]`` is measurement i's run."""

    doc: Doc
    runs: tuple[str, ...]

    @property
    def root(self) -> str:
        return self.runs[0]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    folder = tmp_path_factory.mktemp("bisection")
    (folder / PROFILE_FILE).write_text(NODE_PROFILE)
    node = FakeNode("n1")
    req = BisectRequest(
        builds=tuple(RELEASES), profiles=(PROFILE_FILE,), reach=Reach(db=folder / "r.db")
    )
    nodes = fake_profiles(load_profile(str(folder / PROFILE_FILE)), [node])
    kit = SteppedKit(node, RELEASES, "v1.36.0", 0.25)
    model = run_bisect(req, lambda _: None, kit=kit, builder=FakeBuilder(), nodes=nodes)
    assert [s.outcome for s in model.steps] == ["FAIL", "BAD", "GOOD"]
    assert model.conclusion.culprit == "v1.36.0"
    with Store(folder / "r.db") as store:
        doc = json.loads(json.dumps(export_runs(store), default=str))
    return Source(doc, tuple(s.run_id for s in model.steps))


# --- writing the state: the import file, or the database itself ---------------------------


class Raw(str):
    """A JSON token written as is (``1e400``, ``NaN``): what json.dumps cannot produce."""


def _dumps(plan: dict[str, Any]) -> str:
    raws: list[str] = []

    def mark(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(str(value))
            return f"@raw{len(raws) - 1}@"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(plan))
    for i, token in enumerate(raws):
        text = text.replace(f'"@raw{i}@"', token)
    return text


def _plans(doc: Doc, change: Callable[[Entries], None] | None) -> dict[str, str]:
    """Each bisection run's plan_json after ``change`` to the entries."""
    plans = {item["run"]["id"]: json.loads(item["run"]["plan_json"]) for item in doc["runs"]}
    entries = {plan["bisect"]["index"]: plan["bisect"] for plan in plans.values()}
    if change is not None:
        change(entries)
    return {run: _dumps(plan) for run, plan in plans.items()}


def _import(doc: Doc, db: str, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp / "runs.json").write_text(json.dumps(doc))
    done = invoke(["runs", "import", "runs.json", "--db", db], tmp, capsys)
    assert done.code == 0, done.err


def _write_sql(db: str, plans: dict[str, str]) -> None:
    """UPDATE runs SET plan_json, as any client of the database could."""
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db) as pg:
            for run, text in plans.items():
                pg.execute("UPDATE runs SET plan_json = %s WHERE id = %s", (text, run))
        return
    lite = sqlite3.connect(db)
    with lite:  # commits
        for run, text in plans.items():
            lite.execute("UPDATE runs SET plan_json = ? WHERE id = ?", (text, run))
    lite.close()


def crafted(
    src: Source, db: str, writer: str, change: Callable[[Entries], None] | None, tmp: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The database ``db`` holding the bisection with ``change`` made by ``writer``."""
    doc = copy.deepcopy(src.doc)
    plans = _plans(doc, change)
    if writer == "file":
        for item in doc["runs"]:
            item["run"]["plan_json"] = plans[item["run"]["id"]]
        _import(doc, db, tmp, capsys)
    else:
        _import(doc, db, tmp, capsys)
        _write_sql(db, plans)


# --- the crafted records ------------------------------------------------------------------


def _set(index: int, path: str, value: Any) -> Callable[[Entries], None]:
    """Measurement ``index``'s entry changed at ``path`` (``record.spans.0``; ``-key``: removed)."""

    def change(entries: Entries) -> None:
        *parents, last = path.split(".")
        node: Any = entries[index]
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if last.startswith("-"):
            del node[last[1:]]
        else:
            node[int(last) if last.isdigit() else last] = value

    return change


def _both(*changes: Callable[[Entries], None]) -> Callable[[Entries], None]:
    def change(entries: Entries) -> None:
        for c in changes:
            c(entries)

    return change


@dataclass(frozen=True)
class Crafted:
    id: str
    change: Callable[[Entries], None]
    words: tuple[str, ...]
    writers: tuple[str, ...] = ("file", "sql")  # the importer refuses NaN itself: sql only
    report: bool = True  # `abtest report` refuses it too (it needs no playbook)


S = "settings."
PG = pytest.mark.postgres
CRAFTED = [
    # the records the issue names
    Crafted("step-without-spans", _set(2, "record.-spans", None), ("step 2's spans: missing",)),
    Crafted("spans-of-3-values", _set(2, "record.spans.0", ["mid vs low", 1.0, 2.0]),
            ("step 2's spans[0]: 3 values, expected 4",)),
    Crafted("spans-of-5-values", _set(1, "record.spans.1", ["high vs mid", 1, 2, 3, 4]),
            ("step 1's spans[1]: 5 values, expected 4",)),
    Crafted("range-of-one-build", _set(0, "settings.builds", [["v1.34.4", None]]),
            ("settings.builds: the range holds 1 build(s)",)),
    Crafted("step-of-one-build", _set(1, "record.builds", ["v1.36.0"]),
            ("step 1's builds: 1 value(s), expected 3 (low, mid, high)",)),
    Crafted("build-outside-the-range", _both(_set(1, "builds.1", "v1.99.0"),
                                              _set(1, "record.builds.1", "v1.99.0")),
            ("step 1's builds: 'v1.99.0' is not a build of the range",)),
    Crafted("level-high", _set(1, "record.level", "high"),
            ("step 1's level: expected a probability, got str 'high'",)),
    Crafted("ends-of-three-builds", _set(0, "record.builds", ["v1.34.4", "v1.36.0", "v1.36.3"]),
            ("the ends' builds: 3 value(s), expected 2 (good, bad)",)),
    Crafted("margin-nan", _set(0, "settings.margin_pct", Raw("NaN")),
            (S + "margin_pct: margin nan is not a finite number",), writers=("sql",)),
    # `runs import` refuses 1e400 and a 401-digit integer itself (test_import_numbers.py), as
    # it refuses NaN: only a database written directly can hold them
    Crafted("margin-1e400", _set(0, "settings.margin_pct", Raw("1e400")),
            (S + "margin_pct: margin inf is not a finite number",), writers=("sql",)),
    Crafted("margin-negative", _set(0, "settings.margin_pct", -50),
            (S + "margin_pct: margin -50 % is negative",)),
    Crafted("metric-no-such-column", _set(0, "settings.metric", "no_such_column"),
            (S + "metric: 'no_such_column' is not a column --metric decides on",)),
    Crafted("size-0", _set(0, "settings.size", 0),
            (S + "size: must be between 1 and 10000 pods, got 0",)),
    Crafted("one-block", _set(0, "settings.max_blocks", 1),
            (S + "max_blocks: must be between 2 and 10000 blocks, got 1",)),
    # the rest of the settings under the command line's rules
    Crafted("size-not-in-playbook", _set(0, "settings.size", 20),
            (S + "size: size 20 is not in playbook lab-regression",), report=False),
    Crafted("seed-401-digits", _set(0, "settings.seed", 10**400),
            (S + "seed: int", "is out of range"), writers=("sql",)),
    Crafted("confidence-1", _set(0, "settings.confidence", 1.0),
            (S + "confidence: must be in [0.5, 1)",)),
    Crafted("first-look-above-cap", _set(0, "settings.first_look", 12),
            (S + "first_look: 12 is above max_blocks 9",)),
    Crafted("first-look-1", _set(0, "settings.first_look", 1),
            (S + "first_look: at least 2 blocks are needed for an interval",)),
    Crafted("build-name-with-a-shell", _set(0, "settings.builds.2.0", "v1.36.0;id"),
            (S + "builds[2]: 'v1.36.0;id' is neither a kubelet release",)),
    Crafted("build-folder-elsewhere", _set(0, "settings.builds.1.1", "/etc"),
            (S + "builds[1]'s folder: '/etc' is not an absolute path to series",)),
    Crafted("playbook-unknown", _set(0, "settings.playbook", "no-such-playbook"),
            (S + "playbook:", "no-such-playbook"), report=False),
    Crafted("profile-with-a-terminal-escape",
            _set(0, "settings.profiles", ["\x1b]0;owned\x07\x1b[2J" + PROFILE_FILE]),
            (S + r"profiles[0]: str '\x1b]0;owned\x07\x1b[2Jnode.yaml' holds a control",)),
    Crafted("playbook-lone-surrogate", _set(0, "settings.playbook", "lab-\ud800"),
            (S + r"playbook: str 'lab-\ud800' holds a lone surrogate",)),
    Crafted("settings-not-an-object", _set(0, "settings", ["v1.34.4"]),
            ("settings: expected an object, got list",)),
    # records that do not fit the search they are part of
    Crafted("record-not-an-object", _set(1, "record", "BAD"),
            ("step 1's record: expected an object, got str 'BAD'",)),
    Crafted("step-off-the-search", _set(1, "record.outcome", "GOOD"),
            ("step 2's builds: v1.34.4, v1.35.4, v1.36.0, but the steps before it lead to "
             "v1.36.0, v1.36.1, v1.36.3",)),
    Crafted("step-after-the-ends-passed", _set(0, "record.outcome", "PASS"),
            ("step 1: the search ended at the ends (PASS)",)),
    Crafted("outcome-unknown", _set(2, "record.outcome", "MORE"),
            ("step 2's outcome: 'MORE' is not one of GOOD, BAD, SPREAD, UNRESOLVED",)),
    Crafted("record-of-another-run", _set(2, "record.run_id", "20260101-000000-aaaaaa"),
            ("step 2's run_id: '20260101-000000-aaaaaa', but it is stored in run",)),
    Crafted("record-index-elsewhere", _set(2, "record.index", 5),
            ("step 2's index: 5, but its run",)),
    Crafted("measurement-twice", _set(2, "index", 1),
            ("bisect entry: index: measurement 1 is also run",)),
    Crafted("blocks-not-a-look", _set(1, "record.blocks", 5),
            ("step 1's blocks: 5, but look",)),
    Crafted("span-estimate-nan", _set(1, "record.spans.0.1", Raw("NaN")),
            ("step 1's spans[0]: must be a finite number, got nan",), writers=("sql",)),
    Crafted("span-bounds-crossed", _set(1, "record.spans.0", ["mid vs low", 5, 9.0, 1.0]),
            ("step 1's spans[0]: low bound 9.0 above high bound 1.0",)),
    Crafted("wall-negative", _set(1, "record.wall_s", -1),
            ("step 1's wall_s: must be between 0 and inf s, got -1",)),
    Crafted("pending-wall-negative", _both(_set(2, "-record", None), _set(2, "wall_s", -3)),
            ("step 2's wall_s: must be between 0 and inf s, got -3",)),
    Crafted("step-decided-with-the-ends-undecided", _set(0, "-record", None),
            ("step 1: run", "measured it with the ends undecided")),
]  # fmt: skip


def _rows() -> list[Any]:
    """Every case by each writer on SQLite; on PostgreSQL (a fresh server database each, the
    slow part) each case once, the writers taking turns."""
    rows = [
        pytest.param(c, w, "sqlite", id=f"{c.id}-{w}-sqlite") for c in CRAFTED for w in c.writers
    ]
    for i, c in enumerate(CRAFTED):
        w = c.writers[i % len(c.writers)]
        rows.append(pytest.param(c, w, "postgres", id=f"{c.id}-{w}-postgres", marks=PG))
    return rows


@pytest.fixture()
def no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    def reached() -> None:
        raise AssertionError("a node was reached")

    monkeypatch.setattr(abtest.engine.sweep, "RealNodes", reached)


def _runs(db: str) -> int:
    with Store(db) as store:
        return len(store.runs_frame())


def refused(
    args: list[str], db: str, words: tuple[str, ...], tmp: Path,
    capsys: pytest.CaptureFixture[str],
) -> str:  # fmt: skip
    """``abtest ARGS --db DB`` exits 2 with one error line holding ``words``."""
    done = invoke([*args, "--db", db], tmp, capsys)
    both = done.out + done.err
    assert "Traceback" not in both, both
    assert "\x1b" not in both and "\x07" not in both, both  # stored text shown escaped
    assert done.code == 2, both
    lines: list[str] = done.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("abtest: error: "), done.err
    for word in words:
        assert word in lines[0], f"{word!r} not in: {lines[0]}"
    return lines[0]


@pytest.fixture(scope="module")
def pg_database(pg_server: PgServer) -> str:
    """One server database for the crafted rows (CREATE DATABASE costs a checkpoint each)."""
    return str(pg_server.create_database())


def _db(backend: str, tmp: Path, request: pytest.FixtureRequest) -> str:
    """An empty database: a new SQLite file, or the PostgreSQL one emptied of every run."""
    if backend == "sqlite":
        return str(tmp / "r.db")
    import psycopg

    db = str(request.getfixturevalue("pg_database"))
    with Store(db), psycopg.connect(db) as pg:  # the schema made, then every run's rows gone
        pg.execute("TRUNCATE runs CASCADE")
    return db


@pytest.mark.usefixtures("no_node")
@pytest.mark.parametrize(("case", "writer", "backend"), _rows())
def test_a_crafted_stored_bisection_is_refused_whole_before_anything_runs(
    case: Crafted, writer: str, backend: str, source: Source, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    (tmp_path / PROFILE_FILE).write_text(NODE_PROFILE)
    db = _db(backend, tmp_path, request)
    crafted(source, db, writer, case.change, tmp_path, capsys)
    before = _runs(db)
    line = refused(["bisect", "--resume", source.root], db, case.words, tmp_path, capsys)
    assert f"bisection {source.root}: " in line
    if case.report:  # `abtest report` reads the same state through the same checks
        refused(["report", source.root, "--out", "rep"], db, case.words, tmp_path, capsys)
        assert not (tmp_path / "rep").exists()
    assert _runs(db) == before  # nothing was measured, no run started


# --- the options given again on --resume ----------------------------------------------------

STORED = (
    "--builds", ",".join(RELEASES), "--good", RELEASES[0], "--bad", RELEASES[-1],
    "--playbook", "lab-regression", "--profile", PROFILE_FILE, "--metric", "batch-ready",
    "--size", "10", "--max-blocks", "9", "--margin", "5", "--seed", "20251129",
)  # fmt: skip

CHANGED = [
    ("builds", ("--builds", "v1.35.4,v1.36.0,v1.36.3"),
     "--builds: v1.35.4,v1.36.0,v1.36.3 differs from the range bisection {root} stored, "
     "v1.34.4,v1.35.4,v1.36.0,v1.36.1,v1.36.3"),
    ("good", ("--good", "v1.35.4"),
     "--good: v1.35.4 differs from the good end bisection {root} stored, v1.34.4"),
    ("bad", ("--bad", "v1.36.3+agc"),
     "--bad: v1.36.3+agc differs from the bad end bisection {root} stored, v1.36.3"),
    ("playbook", ("--playbook", "lab-bisect"),
     "--playbook: lab-bisect differs from the playbook bisection {root} stored, lab-regression"),
    ("profile", ("--profile", "lab"),
     f"--profile: lab differs from the profiles bisection {{root}} stored, {PROFILE_FILE}"),
    ("metric", ("--metric", "p95"),
     "--metric: p95 differs from the metric bisection {root} stored, batch-ready"),
    ("size", ("--size", "20"), "--size: 20 differs from the size bisection {root} stored, 10"),
    ("max-blocks", ("--max-blocks", "6"),
     "--max-blocks: 6 differs from the cap of blocks bisection {root} stored, 9"),
    ("margin", ("--margin", "2.5"),
     "--margin: 2.5 differs from the margin bisection {root} stored, 5"),
    ("seed", ("--seed", "7"), "--seed: 7 differs from the seed bisection {root} stored, 20251129"),
    ("metric-unknown", ("--metric", "p99"), "--metric: unknown metric 'p99'"),
    ("margin-out-of-range", ("--margin", "-1"), "--margin: margin -1 % is negative"),
]  # fmt: skip


@pytest.fixture(scope="module")
def sqlite_imported(source: Source, tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("imported") / "r.db")
    with Store(db) as store:
        import_runs(store, source.doc)
    return db


@pytest.fixture(scope="module")
def pg_imported(source: Source, pg_server: PgServer) -> str:
    db = str(pg_server.create_database())
    with Store(db) as store:
        import_runs(store, source.doc)
    return db


@pytest.fixture()
def imported(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The unchanged bisection imported into a database of ``backend``, shared by the tests
    below (a refused or finished resume writes nothing: each test checks the run count)."""
    (tmp_path / PROFILE_FILE).write_text(NODE_PROFILE)
    return str(request.getfixturevalue(f"{'pg' if backend == 'postgres' else backend}_imported"))


BACKENDS = ["sqlite", pytest.param("postgres", marks=PG)]


@pytest.mark.usefixtures("no_node")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("name", "args", "line"), CHANGED, ids=[c[0] for c in CHANGED])
def test_an_option_that_differs_from_the_stored_one_is_refused_by_name(
    name: str, args: tuple[str, ...], line: str, imported: str, source: Source,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    expected = "abtest: error: " + line.format(root=source.root)
    got = refused(["bisect", "--resume", source.root, *args], imported, (), tmp_path, capsys)
    assert got.startswith(expected), got
    assert _runs(imported) == len(source.runs)


@pytest.mark.usefixtures("no_node")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "args", [(), STORED, ("--accept-new-host-key",)], ids=["none", "all-as-stored", "kept"]
)
def test_the_stored_options_and_this_commands_own_are_accepted(
    args: tuple[str, ...], imported: str, source: Source, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    done = invoke(
        ["bisect", "--resume", source.root, *args, "--db", imported, "--json"], tmp_path, capsys
    )
    assert done.code == 0, done.err
    out = json.loads(done.out)
    assert (out["bisection"], out["verdict"], out["culprit"]) == (source.root, "CULPRIT", "v1.36.0")
    assert f"resuming bisection {source.root}: 3 measurement(s) decided" in done.err
    assert _runs(imported) == len(source.runs)


def _renamed(old: str, new: str, folder: str) -> Callable[[Entries], None]:
    """The build ``old`` called ``new`` everywhere, a series in ``folder`` (a whole, consistent
    state: only the folder can differ from what a resume is given)."""

    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        return new if value == old else value

    def change(entries: Entries) -> None:
        for index, entry in list(entries.items()):
            entries[index].update(rename(entry))
        pairs = entries[0]["settings"]["builds"]
        pairs[-1][1] = folder

    return change


@pytest.mark.usefixtures("no_node")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_series_folder_other_than_the_stored_one_is_refused_by_its_folder(
    backend: str, source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    (tmp_path / PROFILE_FILE).write_text(NODE_PROFILE)
    db = _db(backend, tmp_path, request)
    kept, given = tmp_path / "kept" / "demo", tmp_path / "other" / "demo"
    change = _renamed("v1.36.3", "v1.36.3+demo", str(kept))
    crafted(source, db, "sql", change, tmp_path, capsys)
    args = ["bisect", "--resume", source.root, "--bad", f"v1.36.3+{given}"]
    line = refused(args, db, (), tmp_path, capsys)
    assert line.startswith(
        f"abtest: error: --bad: v1.36.3+demo (folder {given}) differs from the bad end "
        f"bisection {source.root} stored, v1.36.3+demo (folder {kept})"
    ), line
    assert _runs(db) == len(source.runs)
