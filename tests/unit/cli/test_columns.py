"""Issue 44: ``COLUMNS=0 abtest gates --list`` printed nothing and exited 0 (rich took a width
of 0), ``COLUMNS=0 abtest --help`` printed nothing either, ``TERMINAL_WIDTH=abc abtest --help``
was a traceback in typer. A width that is no positive number of columns is ignored: a pipe
gets 80 columns, as with no COLUMNS at all. First as a user's shell starts abtest (a new
process: the consoles are made at import, where the bug was), then in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input import invoke

from abtest.cli.terminal import sane_terminal_env

JUNK = ["0", "-5", "abc", "00", "80x", "", "99999999"]
GATE = "KubeletQOSCgroupUpdateCoalescing"  # the shipped catalog's factor


def _abtest(env_changes: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
    return subprocess.run(
        [sys.executable, "-c", "from abtest.cli.main import main; main()", *args],
        capture_output=True, text=True, timeout=120, env=env | env_changes, check=False,
    )  # fmt: skip


def _fits_80(out: str) -> None:
    lines = out.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, out


@pytest.mark.parametrize("columns", ["0", "-5", "abc"])
def test_gates_list_with_a_junk_columns_prints_the_catalog_at_80(columns: str) -> None:
    done = _abtest({"COLUMNS": columns}, "gates", "--list")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert GATE in done.stdout and "catalog agc" in done.stdout
    _fits_80(done.stdout)


@pytest.mark.parametrize(
    ("variable", "value"), [("COLUMNS", "0"), ("TERMINAL_WIDTH", "abc"), ("TERMINAL_WIDTH", "0")]
)
def test_help_with_a_junk_width_is_the_help(variable: str, value: str) -> None:
    done = _abtest({variable: value}, "--help")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "Usage:" in done.stdout and "COMMAND [ARGS]" in done.stdout, done.stdout
    assert "gates" in done.stdout
    _fits_80(done.stdout)


@pytest.mark.parametrize("columns", ["0", "-5", "abc"])
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["gates", "--list"], (GATE, "feature_gate")),
        (["--help"], ("Usage:", "COMMAND [ARGS]", "runs")),
        (["runs", "--help"], ("Usage:", "runs [OPTIONS]", "show")),
        (["runs", "--db", "{tmp}/r.sqlite"], ("no runs in",)),
    ],
    ids=["gates-list", "help", "runs-help", "runs"],
)
def test_in_process_a_junk_columns_falls_back_to_80(
    columns: str,
    args: list[str],
    words: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    # typer reads TERMINAL_WIDTH once, when typer.rich_utils is first imported: a test before
    # this one in the same process (test_startup_imports sets it to 100) would decide it
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)
    done = invoke([a.replace("{tmp}", str(tmp_path)) for a in args], tmp_path, capsys)
    assert done.code == 0 and "Traceback" not in done.err, done.err
    for word in words:
        assert word in done.out, done.out
    _fits_80(done.out)


@pytest.mark.parametrize("value", JUNK)
def test_a_junk_width_is_dropped(value: str) -> None:
    env = {"COLUMNS": value, "LINES": value, "TERMINAL_WIDTH": value, "TERM": "xterm"}
    assert sane_terminal_env(env) == ["COLUMNS", "LINES", "TERMINAL_WIDTH"]
    assert env == {"TERM": "xterm"}


@pytest.mark.parametrize("value", ["1", "80", "250", "10000"])
def test_a_real_width_is_kept(value: str) -> None:
    env = {"COLUMNS": value}
    assert sane_terminal_env(env) == [] and env == {"COLUMNS": value}
