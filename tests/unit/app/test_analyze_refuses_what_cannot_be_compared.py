"""Issue 11, items 12-14 and 17 at the `abtest analyze` surface: exact duplicate rounds and a
duplicated header are refused, an empty cell in a metric not asked for is fine, a constant
ratio says "no variation", and the means beside a paired saving are the ones it was made of."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from abtest.cli import render
from abtest.cli.analyze import analyze
from abtest.errors import UserError

app = typer.Typer()
app.command("analyze")(analyze)


@app.callback()
def _root() -> None:
    """Keeps `analyze` a subcommand, as in the real app."""


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich folds cells to the terminal; a wide console keeps the words whole for the asserts."""
    monkeypatch.setattr(render.console, "width", 250)


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, ["analyze", *args], terminal_width=250)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rounds.csv"
    path.write_text(text)
    return path


NO_BLOCKS = """\
arm,size,batch_ready_s,p95_s
baseline,50,2.0,1.9
baseline,50,2.4,2.2
baseline,50,2.2,2.0
treat,50,1.5,1.4
treat,50,1.7,1.6
treat,50,1.6,1.5
"""


def test_exact_duplicate_rounds_are_refused_naming_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, NO_BLOCKS + "treat,50,1.7,1.6\n")
    result = _run(str(path))
    assert isinstance(result.exception, UserError), result.output
    line = result.exception.one_line()
    assert str(path) in line and "duplicate" in line
    assert "line 6" in line and "line 8" in line
    assert result.exception.todo and "round" in result.exception.todo


def test_a_distinguishing_column_makes_rounds_distinct(tmp_path: Path) -> None:
    rows = NO_BLOCKS.splitlines()
    numbered = ["round," + rows[0]] + [f"{i},{row}" for i, row in enumerate(rows[1:], start=1)]
    numbered.append("7,treat,50,1.7,1.6")  # same times as round 5, but its own round id
    result = _run(str(_write(tmp_path, "\n".join(numbered) + "\n")), "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    (c, _) = json.loads(result.stdout)["comparisons"]
    assert c["n_treatment"] == 4


def test_duplicated_metric_header_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "arm,size,p95_s,batch_ready_s,p95_s\nb,50,1,2,3\nt,50,1,2,3\n")
    result = _run(str(path))
    assert isinstance(result.exception, UserError), result.output
    line = result.exception.one_line()
    assert str(path) in line and "p95_s" in line and "twice" in line


def test_empty_cell_in_a_metric_not_asked_for(tmp_path: Path) -> None:
    text = NO_BLOCKS.replace("treat,50,1.7,1.6", "treat,50,1.7,")
    path = _write(tmp_path, text)
    ok = _run(str(path), "--metric", "batch_ready_s", "--json")
    assert ok.exit_code == 0, (ok.output, ok.exception)
    assert [c["metric"] for c in json.loads(ok.stdout)["comparisons"]] == ["batch_ready_s"]
    asked = _run(str(path), "--metric", "p95_s")
    assert isinstance(asked.exception, UserError)
    assert "line 6, column p95_s" in asked.exception.one_line()


def test_constant_ratio_prints_no_interval_and_says_why(tmp_path: Path) -> None:
    base = [4.0, 4.37, 3.91, 4.13, 4.61]
    lines = ["arm,size,block,batch_ready_s"]
    for b, v in enumerate(base):
        lines += [f"baseline,50,{b},{v!r}", f"treat,50,{b},{v * 0.9!r}"]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    data = json.loads(_run(str(path), "--json").stdout)
    (c,) = data["comparisons"]
    assert c["pct_ci"] is None and c["p_value"] is None
    assert "no variation" in c["note"] and c["pct_note"]
    table = _run(str(path))
    assert table.exit_code == 0
    assert "no variation" in table.stdout and "e-4" not in table.stdout


def test_means_beside_a_paired_saving_are_the_ones_it_was_made_of(tmp_path: Path) -> None:
    lines = ["arm,size,block,batch_ready_s"]
    for b, (base, treat) in enumerate([(4.0, 3.0), (4.4, 3.5), (3.8, 2.9)]):
        lines += [f"baseline,50,{b},{base}", f"treat,50,{b},{treat}"]
    lines += ["baseline,50,7,9.0"]  # unbalanced: a slow baseline round with no partner
    path = _write(tmp_path, "\n".join(lines) + "\n")
    (c,) = json.loads(_run(str(path), "--json").stdout)["comparisons"]
    assert c["savings_s"] == pytest.approx(c["baseline_mean_matched"] - c["treatment_mean_matched"])
    assert abs(c["baseline_mean_matched"] - 4.0667) < 1e-3
    assert abs(c["baseline_mean"] - 5.3) < 1e-9  # all four rounds, labelled as such
    table = _run(str(path)).stdout
    # The table shows the matched mean the saving uses, and the all-rounds one labelled.
    assert "4.067" in table and "all 5.300" in table


def test_csv_format_carries_the_matched_means(tmp_path: Path) -> None:
    import csv
    import io

    lines = ["arm,size,block,batch_ready_s"]
    for b, (base, treat) in enumerate([(4.0, 3.0), (4.4, 3.5), (3.8, 2.9)]):
        lines += [f"baseline,50,{b},{base}", f"treat,50,{b},{treat}"]
    lines += ["baseline,50,7,9.0"]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    (row,) = csv.DictReader(io.StringIO(_run(str(path), "--format", "csv").stdout))
    matched = float(row["baseline_mean_matched"]) - float(row["treatment_mean_matched"])
    assert float(row["savings_s"]) == pytest.approx(matched)
    assert float(row["baseline_mean"]) == pytest.approx(5.3)


def test_duplicate_rounds_differing_only_in_formatting_are_refused(tmp_path: Path) -> None:
    """Issue 26: `2.00` repeats `2.0` (and ` 50` repeats `50`): compared by value, not text."""
    path = _write(tmp_path, NO_BLOCKS + "treat,50.0,1.70,1.600\n")
    result = _run(str(path))
    assert isinstance(result.exception, UserError), result.output
    line = result.exception.one_line()
    assert "duplicate" in line and "line 6" in line and "line 8" in line


def test_blocks_stay_text_so_1_and_1_0_are_different_blocks(tmp_path: Path) -> None:
    text = "arm,size,block,batch_ready_s\nb,50,1,2.0\nb,50,1.0,2.0\nt,50,1,1.5\nt,50,1.0,1.6\n"
    result = _run(str(_write(tmp_path, text)), "--json", "--baseline", "b")
    assert result.exit_code == 0, (result.output, result.exception)


def test_nothing_compared_exits_non_zero_and_says_why(tmp_path: Path) -> None:
    """Issue 26: every arm skipped (no baseline rounds at its size) is not a success."""
    text = "arm,size,batch_ready_s\nbaseline,20,2.0\nbaseline,20,2.1\nfast,50,1.5\nfast,50,1.6\n"
    path = _write(tmp_path, text)
    for args in ((), ("--json",), ("--format", "csv")):
        result = _run(str(path), *args)
        assert isinstance(result.exception, UserError), (args, result.output)
        assert result.exception.exit_code == 2
        line = result.exception.one_line()
        assert "nothing was compared" in line and "fast at 50" in line, line
    (as_json,) = [_run(str(path), "--json")]
    assert json.loads(as_json.stdout)["skipped"][0]["arm"] == "fast"  # still says what
