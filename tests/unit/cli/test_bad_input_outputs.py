"""Issue 35, through the real entry point: an output never clobbers what it names (a character
device made in a temporary folder, never the real /dev; a FIFO; a symlink; a folder), derived
output folders stay under reports/; a database location is a path or a postgresql:// URL and
nothing else, and no password reaches any output; CSV cells a spreadsheet would run are
escaped."""

from __future__ import annotations

import csv
import io
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_input import Case, invoke, run_case
from history_store import add_runs

from abtest.batch.run_record import new_run
from abtest.config.csv_cells import safe_cell
from abtest.config.locations import redact, redact_argv
from abtest.store.db import Store

KEEP = "the file a link points at: never written through\n"


def _chardev(path: Path) -> None:
    try:  # /dev/null's numbers, in a temporary folder
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a character device needs root (CAP_MKNOD)")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink(path: Path) -> None:
    (path.parent / "kept.txt").write_text(KEEP)
    path.symlink_to("kept.txt")


def _dangling(path: Path) -> None:
    path.symlink_to("nowhere/new.txt")


def _folder(path: Path) -> None:
    path.mkdir()


#: what is in the output's place -> the words of the refusal
KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "chardev": (_chardev, "character device"),
    "fifo": (_fifo, "fifo"),
    "symlink": (_symlink, "symbolic link"),
    "dangling-symlink": (_dangling, "symbolic link"),
    "folder": (_folder, "directory"),
}


def _rounds_csv(path: Path) -> None:
    """Rounds whose verdict is PASS (shared block effects, a small wobble)."""
    lines = ["arm,size,block,batch_ready_s,p95_s"]
    blocks = [1.0, 1.08, 0.95, 1.03, 0.97, 1.05, 0.99, 1.02]
    wobble = [0.004, -0.003, 0.002, -0.004, 0.003, -0.002, 0.001, -0.001]
    for b, (k, w) in enumerate(zip(blocks, wobble, strict=True)):
        lines += [f"ref,150,{b},{4.0 * k:.4f},{3.6 * k:.4f}"]
        lines += [f"cand,150,{b},{4.0 * k * (1 + w):.4f},{3.6 * k * (1 + w):.4f}"]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    path = tmp_path / "r.sqlite"
    with Store(path) as store:
        add_runs(store, [5.0] * 6, rounds=2)  # history needs six runs
    return path


def _run_id(db: Path) -> str:
    with Store(db) as store:
        return str(store.query("SELECT id FROM runs ORDER BY created_at")[0][0])


# command -> (args with {out} for the output's path, the flag the error names, exit code)
FILE_OUTPUTS: dict[str, tuple[tuple[str, ...], str]] = {
    "runs-export": (("runs", "export", "-o", "{out}", "--db", "{db}"), "--out"),
    "gates-run-id-file": (("gates", "--all", "--run-id-file", "{out}", "--db", "{db}"),
                          "--run-id-file"),
    "report-md": (("report", "{run}", "-o", "rep", "-f", "md", "--db", "{db}"), "--out"),
    "report-html": (("report", "{run}", "-o", "rep", "-f", "html", "--db", "{db}"), "--out"),
    "report-csv": (("report", "{run}", "-o", "rep", "-f", "csv", "--db", "{db}"), "--out"),
    "report-json": (("report", "{run}", "-o", "rep", "-f", "json", "--db", "{db}"), "--out"),
    "report-junit": (("report", "{run}", "-o", "rep", "-f", "junit", "--db", "{db}"), "--out"),
    "history-md": (("history", "--node", "node-h", "-o", "hist", "--db", "{db}"), "--out"),
}  # fmt: skip
# the file inside the output folder a planted entry takes the place of
INSIDE = {
    "report-md": "rep/report.md",
    "report-html": "rep/report.html",
    "report-csv": "rep/rounds.csv",
    "report-json": "rep/report.json",
    "report-junit": "rep/report.junit.xml",
    "history-md": "hist/history.md",
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("command", list(FILE_OUTPUTS))
def test_an_output_replaces_only_a_regular_file(
    command: str, kind: str, db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, says = KINDS[kind]
    args, flag = FILE_OUTPUTS[command]
    where = tmp_path / INSIDE.get(command, "out.txt")
    where.parent.mkdir(exist_ok=True)
    make(where)
    before = os.lstat(where)
    filled = [
        a.replace("{out}", str(where)).replace("{db}", str(db)).replace("{run}", _run_id(db))
        for a in args
    ]
    named = INSIDE.get(command, str(where))  # a file in an output folder: as the folder is given
    case = Case(f"{command}-{kind}", tuple(filled), (flag, named, says))
    run_case(case, tmp_path, capsys)
    after = os.lstat(where)  # the very same entry: not replaced, not written through
    assert (after.st_ino, after.st_mode, after.st_size) == (
        before.st_ino,
        before.st_mode,
        before.st_size,
    )
    if kind == "symlink":
        assert (where.parent / "kept.txt").read_text() == KEEP
    if kind == "dangling-symlink":
        assert not (where.parent / "nowhere").exists()
    leftovers = [p.name for p in where.parent.iterdir() if p.name.endswith(".tmp")]
    assert not leftovers, leftovers


@pytest.mark.parametrize("kind", ["chardev", "fifo", "symlink", "folder"])
@pytest.mark.parametrize("flag", ["--junit", "--summary"])
def test_regress_outputs_refuse_and_the_verdict_stands(
    flag: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, says = KINDS[kind]
    _rounds_csv(tmp_path / "rounds.csv")
    make(tmp_path / "out")
    base = ["regress", "--csv", "rounds.csv", "--reference", "ref", "--candidate", "cand"]
    case = Case(
        f"regress{flag}-{kind}",
        (*base, flag, "out"),
        (flag, "out", says, "the verdict above stands"),
        code=0,
        stdout_words=("verdict: PASS",),
    )
    run_case(case, tmp_path, capsys)


def test_an_output_is_written_atomically_and_keeps_its_mode(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs.json"
    out.write_text("old")
    out.chmod(0o640)
    inode = out.stat().st_ino
    result = invoke(["runs", "export", "-o", "runs.json", "--db", str(db)], tmp_path, capsys)
    assert result.code == 0, result.err
    assert out.read_text().startswith("{") and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert out.stat().st_ino != inode  # a new file renamed into place, not rewritten
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_planted_figures_link_is_refused(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rep").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "rep" / "figures").symlink_to(tmp_path / "elsewhere")
    case = Case(
        "figures-link",
        ("report", _run_id(db), "-o", "rep", "-f", "md", "--db", str(db)),
        ("figures", "not a folder"),
    )
    run_case(case, tmp_path, capsys)
    assert not list((tmp_path / "elsewhere").iterdir())


# --- derived folders stay under reports/ ------------------------------------------------


def test_a_run_id_never_leads_the_report_folder_out_of_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old.sqlite"
    with Store(db) as store:  # what an import from before the checks could have stored
        (run_id,) = add_runs(store, [5.0], rounds=3)
        store.conn.execute("PRAGMA foreign_keys = OFF")
        for table in ("arms", "visits", "rounds"):
            store.update(table, {"run_id": run_id}, {"run_id": "../../escaped"})
        store.update("runs", {"id": run_id}, {"id": "../../escaped"})
    (tmp_path / "work").mkdir()
    for args in (["report", "../../escaped"], ["report", "a/b"], ["report", "x\n"]):
        case = Case("escape", (*args, "--db", str(db)), ("--out", "cannot name a folder"))
        run_case(case, tmp_path / "work", capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.sqlite", "work"]
    assert not list((tmp_path / "work").iterdir())


def test_a_node_name_never_leads_the_history_folder_out_of_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old.sqlite"
    with Store(db) as store:
        add_runs(store, [5.0] * 6, rounds=2)
        for table in ("runs", "visits", "rounds"):
            store.update(table, {"node_name": "node-h"}, {"node_name": "../../up"})
    (tmp_path / "work").mkdir()
    result = invoke(["history", "--node", "../../up", "--db", str(db)], tmp_path / "work", capsys)
    assert result.code == 2 and "Traceback" not in result.err, result
    assert len(result.err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.sqlite", "work"]
    assert not (tmp_path / "work" / "reports").exists() or not any(
        "up" in p.name for p in (tmp_path / "work" / "reports").iterdir()
    )


# --- database locations --------------------------------------------------------------------

SECRET = "s3cr3t-pw"
LOCATIONS = [
    Case("mysql", ("runs", "--db", f"mysql://ann:{SECRET}@db/results"),
         ("--db", "unsupported database url scheme 'mysql'"), absent=(SECRET,)),
    Case("postgresql+psycopg", ("runs", "--db", f"postgresql+psycopg://ann:{SECRET}@h/r"),
         ("--db", "'postgresql+psycopg'"), absent=(SECRET,)),
    Case("sqlite-url", ("runs", "--db", "sqlite:///tmp/x.sqlite"), ("--db", "'sqlite'"),
         untouched=("sqlite:",)),
    Case("http", ("runs", "--db", f"http://ann:{SECRET}@h/"), ("--db", "'http'"),
         absent=(SECRET,)),
    Case("libpq-keywords", ("runs", "--db", f"host=127.0.0.1 password={SECRET} dbname=r"),
         ("--db", "libpq key=value"), absent=(SECRET,),
         untouched=(f"host=127.0.0.1 password={SECRET} dbname=r",)),
    Case("libpq-quoted", ("runs", "--db", f"dbname=r password='{SECRET} x'"),
         ("--db", "libpq"), absent=(SECRET,)),
    Case("uppercase-scheme-unreachable", ("runs", "--db", f"PostgreSQL://ann:{SECRET}@127.0.0.1:1/r"),
         ("cannot reach",), code=4, absent=(SECRET,)),
    Case("password-in-query", ("runs", "--db", f"postgresql://ann@127.0.0.1:1/r?password={SECRET}"),
         ("cannot reach",), code=4, absent=(SECRET,)),
    Case("sslpassword-in-query",
         ("runs", "--db", f"postgres://ann@127.0.0.1:1/r?sslmode=disable&sslpassword={SECRET}"),
         ("cannot reach",), code=4, absent=(SECRET,)),
    Case("encoded-password-key", ("runs", "--db", f"postgresql://a@127.0.0.1:1/r?pass%77ord={SECRET}"),
         ("cannot reach",), code=4, absent=(SECRET,)),
    Case("unencoded-at-in-password", ("runs", "--db", "postgresql://ann:zq@xw@127.0.0.1:1/r"),
         ("--db", "unencoded '@'", "%40"), absent=("zq", "xw")),
    Case("at-in-password-and-path", ("runs", "--db", "postgresql://ann:zq@xw/yv@127.0.0.1:1/r"),
         ("--db", "unencoded '@'"), absent=("zq", "xw", "yv")),
    Case("unencoded-slash-in-password", ("runs", "--db", "postgresql://ann:zq/xw@127.0.0.1:1/r"),
         ("postgresql://ann:***@",), code=4, absent=("zq", "xw")),
]  # fmt: skip


@pytest.mark.parametrize("case", LOCATIONS, ids=[c.id for c in LOCATIONS])
def test_a_database_location_is_a_path_or_a_postgresql_url(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if case.code == 2:
        run_case(case, tmp_path, capsys)
    else:  # a URL taken as one: the server's failure is one line, exit 4 (abtest: StoreError:)
        result = invoke(list(case.args), tmp_path, capsys)
        both = result.out + result.err
        assert result.code == 4 and "Traceback" not in both, both
        assert len(result.err.strip().splitlines()) == 1, result.err
        assert all(w.lower() in result.err.lower() for w in case.words), result.err
        assert not [s for s in case.absent if s in both], both
    assert [p.name for p in tmp_path.iterdir()] == []  # no file named after the location


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (f"host=h password={SECRET}", "libpq"),
        (f"mysql://a:{SECRET}@h/r", "'mysql'"),
    ],
)
def test_abtest_db_is_parsed_the_same_way(
    env: str,
    words: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ABTEST_DB", env)
    run_case(Case("env", ("runs",), ("$abtest_db", words), absent=(SECRET,)), tmp_path, capsys)
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.postgres
def test_a_reachable_url_shows_no_password_anywhere(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"POSTGRESQL{pg_url.removeprefix('postgresql')}?password={SECRET}"
    result = invoke(["runs", "--db", url], tmp_path, capsys)
    assert result.code == 0 and "password=***" in result.out, result
    assert SECRET not in result.out + result.err


def test_a_run_stores_its_command_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "abtest",
            "batch",
            "--db",
            f"postgresql://a:{SECRET}@h/r",
            f"--db=postgres://a:{SECRET}@h",
        ],
    )
    with Store(tmp_path / "r.sqlite") as store:
        run_id = new_run(store, "batch")
        command = store.run_row(run_id)["command"]
    assert SECRET not in command and command.count("***") == 2


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("postgresql://u:pw@h:5/d", "postgresql://u:***@h:5/d"),
        ("postgresql://u:p@w@h/d?password=x&sslmode=require", "postgresql://u:***@h/d?password=***&sslmode=require"),
        ("postgresql://u@h/d?SSLPASSWORD=x#frag", "postgresql://u@h/d?SSLPASSWORD=***#frag"),
        ("host=h password=x user=u", "host=h password=*** user=u"),
        ("host=h password = 'a b' user=u", "host=h password = *** user=u"),
        ("/var/lib/results.sqlite", "/var/lib/results.sqlite"),
    ],
)  # fmt: skip
def test_redact(given: str, shown: str) -> None:
    assert redact(given) == shown
    assert redact_argv(["--db", given])[1] == shown


# --- CSV cells ---------------------------------------------------------------------------------

FORMULAS = ["=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx", '=HYPERLINK("x")']
NUMBERS = ["-1", "-0.25", "+3", "1e-3", "-2.5E+4"]


@pytest.mark.parametrize("cell", FORMULAS)
def test_a_formula_cell_is_escaped(cell: str) -> None:
    assert safe_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", [*NUMBERS, "baseline", "", 3, -1.5, None])
def test_other_cells_are_unchanged(cell: object) -> None:
    assert safe_cell(cell) == cell


def test_analyze_csv_escapes_an_arm_named_like_a_formula(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["arm,size,block,batch_ready_s"]
    for b in range(6):
        lines += [f"baseline,10,{b},{4 + b * 0.01:.3f}", f"=1+1,10,{b},{3 + b * 0.013:.3f}"]
        lines += [f"@SUM(A1),10,{b},{5 + b * 0.02:.3f}"]
    (tmp_path / "rounds.csv").write_text("\n".join(lines) + "\n")
    result = invoke(["analyze", "rounds.csv", "--format", "csv"], tmp_path, capsys)
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    arms = {r["arm"] for r in rows}
    assert arms == {"'=1+1", "'@SUM(A1)"}, arms
    cells = [v for r in rows for v in r.values()]
    assert not [c for c in cells if c and c[0] in "=+@\t\r"]
    negative = [c for r in rows for k, c in r.items() if c.startswith("-")]
    assert negative and all(float(c) < 0 for c in negative)  # numbers stay numbers


def test_a_csv_abtest_wrote_reads_back_with_the_same_arm_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report's rounds_analysed.csv escapes an arm +X as '+X; analyze reads back +X."""
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        (run_id,) = add_runs(store, [5.0], rounds=3)
        store.update("arms", {"run_id": run_id}, {"name": "+Gate"})
        store.update("rounds", {"run_id": run_id}, {"arm": "+Gate"})
    result = invoke(["report", run_id, "-o", "rep", "-f", "csv", "--db", str(db)], tmp_path, capsys)
    assert result.code == 0, result.err
    assert "'+Gate" in (tmp_path / "rep" / "rounds_analysed.csv").read_text()
    out = invoke(["analyze", "rep/rounds_analysed.csv", "--baseline", "+Gate"], tmp_path, capsys)
    # the run's one arm, read back by its own name (not "'+Gate")
    assert "the baseline arm '+Gate' is in the file" in out.err, out


def test_report_csv_escapes_stored_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        (run_id,) = add_runs(store, [5.0], rounds=3)
        store.update("rounds", {"run_id": run_id}, {"arm": "=cmd()"})
        store.update("arms", {"run_id": run_id}, {"name": "=cmd()"})
    result = invoke(["report", run_id, "-o", "rep", "-f", "csv", "--db", str(db)], tmp_path, capsys)
    assert result.code == 0, result.err
    text = "\n".join(p.read_text() for p in (tmp_path / "rep").glob("*.csv"))
    assert "'=cmd()" in text
    for path in (tmp_path / "rep").glob("*.csv"):
        for row in csv.reader(io.StringIO(path.read_text())):
            assert not [c for c in row if c and c[0] in "=+@\t\r"], (path.name, row)
