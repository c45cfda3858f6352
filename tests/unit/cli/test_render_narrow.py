"""Terminal tables stay readable at 80 columns and in a pipe; analyze --format md|csv|json."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_input import Outcome
from cli_run import run
from rich.console import Console

from abtest.cli.render import print_table

FIXTURE = Path(__file__).parents[2] / "fixtures" / "kube-burner" / "rounds.csv"
LONG_ARM = "+KubeletPodResourcesGet"


def _long_arm_csv(tmp_path: Path) -> Path:
    path = tmp_path / "rounds.csv"
    path.write_text(FIXTURE.read_text().replace("qps3", LONG_ARM))
    return path


Abtest = Callable[..., Outcome]


@pytest.fixture
def abtest(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Abtest:
    """``abtest ARGS`` in-process (tests/cli_run.py), with COLUMNS unset or ``columns``."""

    def call(*args: str, columns: int | None = None) -> Outcome:
        env = {"COLUMNS": None if columns is None else str(columns)}
        return run(list(args), capsys, monkeypatch, env=env)

    return call


def test_analyze_in_a_pipe_fits_80_columns_and_keeps_names_whole(
    tmp_path: Path, abtest: Abtest
) -> None:
    done = abtest("analyze", str(_long_arm_csv(tmp_path)))  # a pipe: rich assumes 80
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.strip() == LONG_ARM for line in lines)
    assert any("-5.333 [-8.202, -2.465]" in line for line in lines)  # an interval on one line


def test_analyze_keeps_the_table_when_it_fits(tmp_path: Path, abtest: Abtest) -> None:
    done = abtest("analyze", str(_long_arm_csv(tmp_path)), columns=200)
    assert done.code == 0, done.err
    row = next(line for line in done.out.splitlines() if LONG_ARM in line)
    assert "-5.333 [-8.202, -2.465]" in row and "│" in row


def test_print_table_narrow_gives_one_block_per_row() -> None:
    out = Console(file=io.StringIO(), width=40)
    print_table("t", ["name", "a long column", "another"], [("x" * 30, "1", "2")], out=out)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "x" * 30 in text and "a long column  1" in text
    two = Console(file=io.StringIO(), width=40)
    print_table("t", ["k", "v"], [("key", "value " * 20)], out=two)
    assert "┃" in two.file.getvalue()  # type: ignore[attr-defined]  # key/value stays a table


def test_analyze_formats_carry_the_same_numbers(tmp_path: Path, abtest: Abtest) -> None:
    path = str(_long_arm_csv(tmp_path))
    as_json = json.loads(abtest("analyze", path, "--format", "json").out)["comparisons"]
    rows = list(csv.DictReader(io.StringIO(abtest("analyze", path, "--format", "csv").out)))
    assert len(rows) == len(as_json) == 4
    for row, c in zip(rows, as_json, strict=True):
        # a CSV cell starting with + is escaped with ' (a spreadsheet would run it: issue 35)
        assert row["arm"] == "'" + c["arm"] and c["arm"].startswith("+")
        assert (int(row["size"]), row["metric"]) == (c["size"], c["metric"])
        assert float(row["savings_ci_low"]) == c["savings_ci"][0]
        assert float(row["pct_reduction"]) == c["pct_reduction"]
    md = abtest("analyze", path, "--format", "md").out
    assert md.startswith("### batch_ready_s, 10 pods, vs baseline (95% intervals)")
    assert f"| {LONG_ARM} | 3/3 (3 pairs) | 4.000 | 9.333 | -5.333 [-8.202, -2.465] |" in md
    bad = abtest("analyze", path, "--format", "xml")
    assert bad.code == 2 and "--format" in bad.err
