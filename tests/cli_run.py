"""``abtest ARGS`` run in-process as a new ``python -m abtest`` process would run it: for tests
of a command's output, not of start-up (a new interpreter per call cost seconds each; the fast
tier has 5 minutes on 2 cores). Tests of start-up itself (imports, ``python -m abtest``, the
console script, signals) keep a subprocess.

What a new process would see differently is the terminal width, read once per process: rich
reads COLUMNS and LINES (and NO_COLOR) when a console is made, and abtest.cli.render makes
its consoles at its first import, perhaps under another test's environment; typer reads
TERMINAL_WIDTH when typer.rich_utils is first imported. :func:`run` sets the environment the
test names and then gives both what they would have read from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from bad_input import Outcome, invoke

from abtest.cli.terminal import sane_terminal_env

#: the repository's root: where a command in a new process runs from
REPO = Path(__file__).resolve().parents[1]
#: read by rich when a console is made (rich.console.Console.__init__)
_CONSOLE_STATE = ("_width", "_height", "no_color")


def as_new_process(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str | None]) -> None:
    """Set ``env`` (None: unset) for this test, and make abtest's consoles and typer's help
    take their width from the environment as they would in a process started with it."""
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    # as abtest.cli.main does first, but undone after the test (the runner's own environment)
    for name in sane_terminal_env(dict(os.environ)):
        monkeypatch.delenv(name)
    import typer.rich_utils

    from abtest.cli import render

    width = os.environ.get("TERMINAL_WIDTH")
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", int(width) if width else None)
    made_now = render.TextConsole()
    for shared in (render.console, render.err_console):
        for attr in _CONSOLE_STATE:
            monkeypatch.setattr(shared, attr, getattr(made_now, attr))


def run(
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: Mapping[str, str | None] | None = None,
    cwd: Path | None = None,
) -> Outcome:
    """``abtest ARGS`` from ``cwd`` (default: the test's working folder, which a subprocess
    would have inherited), with ``env`` changed from the runner's own environment."""
    as_new_process(monkeypatch, env or {})
    return invoke(args, Path.cwd() if cwd is None else cwd, capsys)


def run_process(db: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m abtest ARGS`` in a new process, as a user runs it from the repository, with
    ``db`` as ABTEST_DB and no colour: for the lab tests that run a whole command (a sweep
    that stops and restarts the node) rather than test its output in-process."""
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args],
        env={**os.environ, "ABTEST_DB": str(db), "NO_COLOR": "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
