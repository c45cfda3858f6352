"""`abtest analyze ROUNDS.csv`: good files give hand-checked numbers, bad ones a clear error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from abtest.cli.analyze import analyze
from abtest.errors import UserError
from abtest.ingest.rounds_csv import load_rounds_csv

# A local app so the test does not depend on the rest of the CLI.
app = typer.Typer()
app.command("analyze")(analyze)


@app.callback()
def _root() -> None:
    """Keeps `analyze` a subcommand, as in the real app."""


GOOD = """\
arm,size,block,batch_ready_s,p95_s
baseline,50,1,2.0,1.9
baseline,50,2,2.0,1.8
baseline,50,3,4.0,3.5
baseline,50,4,4.0,3.9
treat,50,1,1.0,0.9
treat,50,2,1.5,1.4
treat,50,3,2.0,1.9
treat,50,4,3.0,2.5
other,50,1,2.2,2.0
other,50,2,1.8,1.7
other,50,3,4.4,4.0
other,50,4,3.6,3.3
"""

KEYS = {
    "arm",
    "size",
    "metric",
    "n_baseline",
    "n_treatment",
    "baseline_mean",
    "treatment_mean",
    "savings_s",
    "savings_ci",
    "pct_reduction",
    "pct_ci",
    "p_value",
    "p_adjusted",
}


def _write(tmp_path: Path, text: str, name: str = "rounds.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, ["analyze", *args])


def _json(*args: str) -> dict[str, list[dict[str, object]]]:
    result = _run(*args, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    data: dict[str, list[dict[str, object]]] = json.loads(result.stdout)
    return data


def test_good_csv_json_numbers_by_hand(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    data = _json(str(path), "--metric", "batch_ready_s")
    treat, other = data["comparisons"]
    assert set(treat) >= KEYS
    assert (treat["arm"], treat["size"], treat["metric"]) == ("treat", 50, "batch_ready_s")
    assert (treat["n_baseline"], treat["n_treatment"]) == (4, 4)
    assert treat["baseline_mean"] == pytest.approx(3.0)
    assert treat["treatment_mean"] == pytest.approx(1.875)
    assert treat["savings_s"] == pytest.approx(1.125)
    # Paired differences 1, .5, 2, 1: mean 1.125, sd sqrt(1.1875/3), t(.975, 3) = 3.182446.
    half = 3.182446305 * math.sqrt(1.1875 / 3) / 2
    assert treat["savings_ci"] == pytest.approx([1.125 - half, 1.125 + half])
    # Geometric means sqrt(2*2*4*4) = sqrt(8)... ratio = 9**.25 / 8**.5 = sqrt(.375).
    assert treat["pct_reduction"] == pytest.approx((1 - math.sqrt(0.375)) * 100)
    assert treat["pct_ci"] == pytest.approx([11.123, 57.807], abs=1e-3)
    assert treat["p_value"] == pytest.approx(0.02479, abs=1e-5)
    assert treat["p_adjusted"] == pytest.approx(2 * 0.02479, abs=2e-5)  # Holm, 2 arms
    assert other["arm"] == "other" and other["savings_s"] == pytest.approx(0.0, abs=1e-12)
    assert data["skipped"] == []


def test_default_metrics_are_every_metric_column(tmp_path: Path) -> None:
    data = _json(str(_write(tmp_path, GOOD)))
    pairs = [(c["metric"], c["arm"]) for c in data["comparisons"]]
    assert pairs == [
        ("batch_ready_s", "treat"),
        ("batch_ready_s", "other"),
        ("p95_s", "treat"),
        ("p95_s", "other"),
    ]


def test_metric_option_repeats_and_commas(tmp_path: Path) -> None:
    path = str(_write(tmp_path, GOOD))
    both = _json(path, "--metric", "p95_s,batch_ready_s")
    assert [c["metric"] for c in both["comparisons"]][:2] == ["p95_s", "p95_s"]
    repeated = _json(path, "--metric", "p95_s", "--metric", "batch_ready_s")
    assert repeated == both


def test_baseline_option_and_every_size_its_own_table(tmp_path: Path) -> None:
    extra = "\n".join(
        [
            "treat,100,1,2.0,1.8",
            "treat,100,2,2.2,2.0",
            "other,100,1,4.0,3.6",
            "other,100,2,4.2,3.8",
            "lonely,150,1,9.0,8.0",
        ]
    )
    path = _write(tmp_path, GOOD + extra + "\n")
    data = _json(str(path), "--baseline", "other", "--metric", "batch_ready_s")
    assert [(c["size"], c["arm"]) for c in data["comparisons"]] == [
        (50, "baseline"),
        (50, "treat"),
        (100, "treat"),
    ]
    # At 100 pods: a table of one, so p_adjusted = p_value; 2 rounds a side.
    at_100 = data["comparisons"][2]
    assert at_100["p_adjusted"] == at_100["p_value"]
    assert at_100["savings_s"] == pytest.approx(2.0)
    assert data["skipped"] == [
        {"arm": "lonely", "size": 150, "reason": "no baseline rounds at this size"}
    ]


def test_too_few_rounds_gives_nulls(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "arm,size,batch_ready_s\nbaseline,50,2.0\nbaseline,50,2.2\nfast,50,1.0\n"
    )
    (comparison,) = _json(str(path))["comparisons"]
    assert comparison["savings_s"] == pytest.approx(1.1)
    assert comparison["savings_ci"] is None and comparison["pct_ci"] is None
    assert comparison["p_value"] is None and comparison["p_adjusted"] is None
    assert "n too small" in str(comparison["note"])


def test_table_output(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["analyze", str(_write(tmp_path, GOOD)), "--confidence", "0.9"], terminal_width=200
    )
    assert result.exit_code == 0, result.exception
    assert "batch_ready_s, 50 pods, vs baseline (90% intervals)" in result.stdout
    assert "p95_s, 50 pods" in result.stdout
    assert "treat" in result.stdout and "1.125" in result.stdout
    assert "geometric means" in result.stdout


# ---------------------------------------------------------------- bad input


def _error(tmp_path: Path, text: str | None, *args: str) -> UserError:
    path = tmp_path / "rounds.csv"
    if text is not None:
        path.write_text(text)
    result = _run(str(path), *args)
    assert isinstance(result.exception, UserError), (result.output, result.exception)
    return result.exception


HEADER = "arm,size,block,batch_ready_s\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "no such file"),
        ("", "empty"),
        ("\n\n", "empty"),
        (HEADER, "no rounds"),
        (HEADER + "baseline,50,1,2.0\n", "only one round"),
        ("size,block,batch_ready_s\n50,1,2.0\n50,2,2.1\n", "no column arm"),
        ("arm,block,batch_ready_s\nbaseline,1,2.0\nbaseline,2,2.1\n", "no column size"),
        ("arm,size,block,wall_s\nbaseline,50,1,2.0\nbaseline,50,2,2.1\n", "no metric column"),
        (HEADER + "baseline,50,1,2.0\nbaseline,50,2,fast\n", "line 3, column batch_ready_s"),
        (HEADER + "baseline,50,1,2.0\nbaseline,50,2,\n", "line 3, column batch_ready_s"),
        (HEADER + "baseline,50,1,2.0\nbaseline,50,2,-1\n", "positive number of seconds"),
        (HEADER + "baseline,50,1,2.0\nbaseline,fifty,2,2.0\n", "line 3, column size"),
        (HEADER + "baseline,50,1,2.0\nbaseline,50.5,2,2.0\n", "whole number"),
        (HEADER + "baseline,50,1,2.0\n,50,2,2.0\n", "line 3, column arm"),
        (HEADER + "baseline,50,1,2.0\nbaseline,50,,2.0\n", "line 3, column block"),
        (HEADER + "baseline,50,1,2.0\nbaseline,50,2,2.0,9,9\n", "line 3 has 6 cells, the header 4"),
        # wider from its first row: pandas took the extra cells as an index (a TypeError)
        (HEADER + "baseline,50,1,2.0,x\nbaseline,50,2,2.0\n", "line 2 has 5 cells, the header 4"),
        (HEADER + "baseline,50,1,2.0,\nbaseline,50,2,2.0,\n", "line 2 has 5 cells"),
        ('arm,size,block,batch_ready_s\n"a\nb",50,1,2.0\nbaseline,50,2,2.0,1\n', "line 4 has 5"),
        (HEADER + "treat,50,1,2.0\ntreat,50,2,2.1\n", "no rounds for the baseline arm"),
        (HEADER + "baseline,50,1,2.0\nbaseline,50,2,2.1\n", "nothing to compare"),
    ],
)
def test_bad_csv(tmp_path: Path, text: str | None, expected: str) -> None:
    error = _error(tmp_path, text)
    assert expected in error.one_line()
    assert str(tmp_path / "rounds.csv") in error.one_line()  # names the file
    assert error.todo  # and says what to do


def test_blank_lines_keep_line_numbers(tmp_path: Path) -> None:
    error = _error(tmp_path, HEADER + "baseline,50,1,2.0\n\nbaseline,50,2,oops\n")
    assert "line 4" in error.one_line()


def test_unknown_metric(tmp_path: Path) -> None:
    _write(tmp_path, GOOD)
    error = _error(tmp_path, GOOD, "--metric", "p99_s")
    assert "unknown metric 'p99_s'" in error.one_line()
    assert "batch_ready_s, p95_s" in error.one_line()


def test_bad_confidence(tmp_path: Path) -> None:
    error = _error(tmp_path, GOOD, "--confidence", "95")
    assert "0.95" in error.one_line()


def test_load_rounds_csv_types(tmp_path: Path) -> None:
    rounds = load_rounds_csv(
        _write(tmp_path, " arm , size,block,batch_ready_s,note\n b ,50,x,2\nb,50,y,3\n")
    )
    assert list(rounds.columns) == ["arm", "size", "block", "batch_ready_s"]
    assert rounds["arm"].tolist() == ["b", "b"]
    assert rounds["size"].tolist() == [50, 50]
    assert rounds["block"].tolist() == ["x", "y"]
    assert rounds["batch_ready_s"].tolist() == [2.0, 3.0]
