"""`abtest analyze --format table|md|csv|json`: the four formats carry the same numbers.

The JSON is the reference; each other format's cells are the JSON's numbers, formatted as that
format formats them (the detectable-effect column was once dropped from md and csv)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from abtest.cli.analyze import analyze

app = typer.Typer()
app.command("analyze")(analyze)


@app.callback()
def _root() -> None:
    """Keeps `analyze` a subcommand, as in the real app."""


ROUNDS = "arm,size,block,batch_ready_s,p95_s\n" + "".join(
    # a fixed per-(arm, block) jitter, so every comparison has variation and an interval
    f"{arm},{size},{block},{base * scale + 0.05 * block + 0.02 * ((block * 37 + i * 11) % 7):.3f},"
    f"{base * scale * 0.9 + 0.03 * ((block * 13 + i * 3) % 5):.3f}\n"
    for size, base in ((20, 2.0), (50, 4.0))
    for i, (arm, scale) in enumerate((("baseline", 1.0), ("treat", 0.8), ("other", 1.05)))
    for block in range(1, 6)
)


def _out(tmp_path: Path, fmt: str) -> str:
    path = tmp_path / "rounds.csv"
    path.write_text(ROUNDS)
    result = CliRunner().invoke(app, ["analyze", str(path), "--format", fmt], terminal_width=300)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def _key(c: dict[str, Any]) -> tuple[int, str, str]:
    return (int(c["size"]), str(c["metric"]), str(c["arm"]))


def _ci(value: float, ci: list[float] | None, digits: int) -> str:
    assert ci is not None  # five complete blocks: every comparison has its interval
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _cells(c: dict[str, Any]) -> list[str]:
    """The numbers a row shows, formatted as md and table show them."""
    return [
        _ci(c["savings_s"], c["savings_ci"], 3),
        _ci(c["pct_reduction"], c["pct_ci"], 1),
        f"{c['mde_pct']:.1f}",
        f"{c['p_value']:.3g}",
        f"{c['p_adjusted']:.3g}",
    ]


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    """(table title's metric and size, arm) -> the row's cells: a Markdown or a wide terminal
    table (one line a row), or a narrow terminal's blocks (an arm, then a label and its value
    per line, in the columns' order)."""
    rows: dict[tuple[str, str], list[str]] = {}
    title, arm = "", ""
    for line in text.splitlines():
        sep = "|" if "|" in line else "│"
        if " pods, vs " in line:
            title, arm = line.strip(" #").split(" vs ")[0], ""
        elif line.count(sep) >= 10:
            cells = [cell.strip() for cell in line.strip().strip(sep).split(sep)]
            rows[(title, cells[0])] = cells
        elif line.startswith("    ") and arm:
            label_value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            rows[(title, arm)].append(label_value[-1] if len(label_value) == 2 else "")
        elif line.startswith("  ") and line.strip():
            arm = line.strip()
            rows[(title, arm)] = [arm]
    return rows


def test_every_format_carries_the_json_numbers(tmp_path: Path) -> None:
    found = json.loads(_out(tmp_path, "json"))["comparisons"]
    assert {c["arm"] for c in found} == {"treat", "other"} and len(found) == 8
    assert all(c["mde_pct"] is not None for c in found)

    by_csv = {_key(r): r for r in csv.DictReader(io.StringIO(_out(tmp_path, "csv")))}
    md = _rows(_out(tmp_path, "md"))
    table = _rows(_out(tmp_path, "table"))
    for c in found:
        row = by_csv[_key(c)]
        for name in ("savings_s", "pct_reduction", "mde_pct", "p_value", "p_adjusted"):
            assert float(row[name]) == c[name], name
        assert [float(row["savings_ci_low"]), float(row["savings_ci_high"])] == c["savings_ci"]
        assert [float(row["pct_ci_low"]), float(row["pct_ci_high"])] == c["pct_ci"]
        title = f"{c['metric']}, {c['size']} pods,"
        for rows in (md, table):
            cells = rows[(title, c["arm"])]
            assert cells[4:9] == _cells(c), (cells, c)
