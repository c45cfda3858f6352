"""Issue 44: text from the results database or a file reaches the terminal as text. A run a
colleague's database or an edited file holds, with rich markup, an OSC title sequence, a CSI
clear, BEL, C1 controls, a bidirectional override, a carriage return or a line break in its
command, playbook, design, stop reason, node, kind, status, arm, settings or failure, is shown
by `abtest runs` and `abtest runs show` with each control as its escape (``\\x1b]0;`` as
those five characters, no ESC byte), markup as brackets; on SQLite and PostgreSQL. The same
for `abtest history`'s Markdown on stdout, for error lines, for a file name that is not UTF-8
(a lone surrogate) and for an output that cannot encode a character."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input import Outcome, invoke
from history_store import NODE, add_runs

from abtest.cli import render
from abtest.cli.terminal import visible
from abtest.store.db import Store

RUN = "20261130-101010-abcd"

# (id, the stored text, what the terminal must show for it)
HOSTILE = [
    ("markup", "[/] [bold]x[/bold] :smile:", "[/] [bold]x[/bold] :smile:"),
    ("osc-title", "t\x1b]0;pwned\x07", "t\\x1b]0;pwned\\x07"),
    ("csi-clear", "c\x1b[2J\x1b[H", "c\\x1b[2J\\x1b[H"),
    ("bel", "b\x07\x07", "b\\x07\\x07"),
    ("c1-csi", "k\x9b31m", "k\\x9b31m"),
    ("bidi-override", "r\u202eevil", "r\\u202eevil"),
    ("carriage-return", "ok\rFAKE", "ok\\rFAKE"),
    ("line-break", "one\nabtest: error: fake", "one\\nabtest: error: fake"),
    ("markup-and-escapes", "[red]\x1b]0;x\x07[/red]\x1b[2J", "[red]\\x1b]0;x\\x07[/red]\\x1b[2J"),
]
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def squeezed(text: str) -> str:
    """The output without white space and box drawing: a value folded over two lines of a
    table cell reads as one again."""
    return re.sub(r"[\s\u2500-\u257f|+-]", "", text)


def _location(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "r.sqlite")
    return str(request.getfixturevalue("pg_url"))


def _hostile_run(location: str, text: str) -> None:
    """A run as a database someone else wrote may hold it: every free text field is ``text``
    behind a letter that says which field it is."""
    with Store(location) as store:
        store.insert(
            "runs",
            {
                "id": RUN,
                "kind": f"K{text}",
                "created_at": "2026-11-30T10:10:10.000+00:00",
                "status": f"S{text}",
                "stop_reason": f"R{text}",
                "node_name": f"N{text}",
                "playbook_name": f"P{text}",
                "design": f"D{text}",
                "command": f"C{text}",
                "plan_json": {"nodes": [f"N{text}"]},
            },
        )
        store.insert(
            "arms",
            {
                "run_id": RUN,
                "name": f"A{text}",
                "on_json": [],
                "settings_json": {f"k{text}": f"v{text}"},
                "status": "failed",
                "failure": f"F{text}",
            },
        )


def _shown_as_text(result: Outcome, shown: str, fields: str) -> None:
    both = result.out + result.err
    assert result.code == 0, both
    assert "Traceback" not in both and "Error" not in result.err, both
    for raw in RAW:
        assert raw not in both, f"{raw!r} reached the terminal:\n{both!r}"
    for field in fields:
        assert squeezed(f"{field}{shown}") in squeezed(result.out), (field, result.out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("stored", "shown"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_runs_and_runs_show_show_stored_text_as_text(
    backend: str,
    stored: str,
    shown: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    location = _location(backend, tmp_path, request)
    _hostile_run(location, stored)
    listed = invoke(["runs", "--db", location], tmp_path, capsys)
    _shown_as_text(listed, shown, "KSNP")
    detail = invoke(["runs", "show", RUN, "--db", location], tmp_path, capsys)
    _shown_as_text(detail, shown, "KSRNPDCAkvF")
    # one line each: a stored line break is shown, never obeyed
    assert "abtest: error: fake" not in [line.strip() for line in detail.out.splitlines()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_history_markdown_on_stdout_shows_a_stored_kubelet_version_as_text(
    backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    location = _location(backend, tmp_path, request)
    evil = "v1.36.1[/]\x1b]0;pwned\x07\x1b[2J"
    with Store(location) as store:
        add_runs(store, [5.0] * 5 + [5.6] * 5, kubelet=["v1.36.0"] * 5 + [evil] * 5)
    done = invoke(["history", "--node", NODE, "--db", location, "-o", "h"], tmp_path, capsys)
    assert done.code == 0 and "Traceback" not in done.err, done.err
    assert not any(raw in done.out + done.err for raw in RAW), repr(done.out)
    assert "kubelet_version: v1.36.0 -> v1.36.1[/]\\x1b]0;pwned\\x07\\x1b[2J" in done.out


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["runs", "show", "x\x1b]0;t\x07"], "x\\x1b]0;t\\x07"),
        (["runs", "import", "f\x1b[2J\u202e.json"], "f\\x1b[2J\\u202e.json"),
        (["runs", "import", "s\udcff.json"], "s\\udcff.json"),
        (["report", "r1", "--format", "md\x1b[31m"], "md\\x1b[31m"),
    ],
    ids=["run-id", "file-name", "surrogate-file-name", "format"],
)
def test_an_error_line_shows_what_it_quotes_as_text(
    args: list[str], shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = invoke([*args, "--db", str(tmp_path / "r.sqlite")], tmp_path, capsys)
    assert done.code == 2 and "Traceback" not in done.err, done.err
    (line,) = done.err.splitlines()
    assert line.startswith("abtest: error: ") and shown in line, line
    assert not any(raw in done.err for raw in RAW)


def test_a_database_file_name_that_is_not_utf8_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lone surrogate (the byte 0xff of a file name, as Python decodes it) was a
    UnicodeEncodeError traceback when printed."""
    name = os.fsdecode(b"r\xff.sqlite")
    with Store(tmp_path / name):
        pass
    done = invoke(["runs", "--db", str(tmp_path / name)], tmp_path, capsys)
    assert done.code == 0 and "Traceback" not in done.err, done.err
    assert "r\\udcff.sqlite" in squeezed(done.out)


def test_an_output_that_cannot_encode_a_character_gets_its_escape(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    _hostile_run(str(db), "café ☕ \x1b[2J")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {
        "PYTHONIOENCODING": "ascii",
        "COLUMNS": "250",
    }
    done = subprocess.run(
        [sys.executable, "-c", "from abtest.cli.main import main; main()", "runs", "show", RUN,
         "--db", str(db)],
        capture_output=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout.decode("ascii")  # every byte ASCII: it decodes
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert "Ccaf\\xe9\\u2615\\x1b[2J" in squeezed(out)


# --- the one place: every way the consoles print -------------------------------------------
def _console() -> tuple[render.TextConsole, io.StringIO]:
    out = io.StringIO()
    console = render.TextConsole()
    console.file = out
    return console, out


@pytest.mark.parametrize(("stored", "shown"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_every_console_path_shows_text(stored: str, shown: str) -> None:
    """print, print(markup=True), a table (title, header, cell), the blocks form, styled pieces
    and the plain echo: what the commands (runs, history, bisect, regress, report, node,
    lab) print goes through one of these."""
    console, out = _console()
    console.print(stored, markup=True, emoji=True)  # a caller asking for markup gets none
    render.print_table(f"T{stored}", [f"H{stored}", "b"], [(f"c{stored}", 1)], out=console)
    render.print_blocks("blocks", ["a", "b", "c"], [(f"h{stored}", f"v{stored}", 2)], console)
    console.print(render.styled((f"s{stored}", "red"), f"p{stored}"))
    text = out.getvalue()
    assert not any(raw in text for raw in RAW), repr(text)
    for mark in ("", "T", "H", "c", "h", "v", "s", "p"):
        assert squeezed(f"{mark}{shown}") in squeezed(text), (mark, text)


def test_echo_shows_text_and_keeps_its_own_lines(capsys: pytest.CaptureFixture[str]) -> None:
    render.echo("# title\n| a\x1b[2J |\n", nl=False)
    render.echo("bell\x07", err=True)
    captured = capsys.readouterr()
    assert captured.out == "# title\n| a\\x1b[2J |\n" and captured.err == "bell\\x07\n"


@pytest.mark.parametrize(
    ("given", "encoding", "shown"),
    [
        ("plain ascii", None, "plain ascii"),
        ("tab\tkept", None, "tab\tkept"),
        ("a\nb", None, "a\nb"),
        ("crlf\r\nlines\r\n", None, "crlf\nlines\n"),
        ("a lone\rreturn", None, "a lone\\rreturn"),
        ("del\x7f nul\x00", None, "del\\x7f nul\\x00"),
        ("surrogate \udcff", None, "surrogate \\udcff"),
        ("zero width \u200b joiner \u2066", None, "zero width \\u200b joiner \\u2066"),
        ("unassigned \U000e0001", None, "unassigned \\U000e0001"),
        ("Grüße ±5 % →", None, "Grüße ±5 % →"),
        ("Grüße →", "ascii", "Gr\\xfc\\xdfe \\u2192"),
        ("Grüße →", "latin-1", "Grüße \\u2192"),
        ("Grüße", "no-such-codec", "Gr\\xfc\\xdfe"),
    ],
)
def test_visible(given: str, encoding: str | None, shown: str) -> None:
    assert visible(given, encoding=encoding) == shown
    assert visible(shown, encoding=encoding) == shown  # shown twice: the same


def test_a_one_line_value_shows_its_line_break() -> None:
    assert visible("a\nb\r\n", lines=False) == "a\\nb\\r\\n"
