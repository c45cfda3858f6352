"""Every report format from the fixture database: files, same tables everywhere, self-contained
HTML, tidy data that reproduces the numbers, strict templates, and the `abtest report` command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pandas as pd
import pytest
from sweeps import build_sweep
from typer.testing import CliRunner

from abtest.analysis.report_model import ReportModel
from abtest.app.report import build_model
from abtest.cli.main import app
from abtest.errors import UserError
from abtest.ingest.rounds_csv import load_rounds_csv
from abtest.report import build_tables, render_html, render_markdown, write_report
from abtest.report.render import environment, render_template
from abtest.stats import compare
from abtest.store.db import Store

EXTERNAL = re.compile(
    r"""(?:\b(?:href|src|xlink:href|action|poster|data)\s*=\s*["']?\s*https?://)"""
    r"""|(?:url\(\s*["']?\s*https?://)|(?:@import)""",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def model(module_store: Store) -> ReportModel:
    return build_model(module_store, build_sweep(module_store))


@pytest.fixture()
def written(model: ReportModel, tmp_path: Path) -> tuple[Path, list[Path]]:
    out = tmp_path / "out"
    return out, write_report(model, out)


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def test_every_format_is_written(written: tuple[Path, list[Path]]) -> None:
    out, paths = written
    names = {p.relative_to(out).as_posix() for p in paths}
    assert {"report.md", "report.html", "report.json"} <= names
    assert {
        "comparisons.csv",
        "arm_summary.csv",
        "rounds.csv",
        "rounds_analysed.csv",
        "pods.csv",
        "attribution.csv",
        "non_additivity.csv",
        "acceptance.csv",
        "kubelet_stages.csv",
        "restarts.csv",
        "environment.csv",
    } <= names
    assert {
        "figures/batch-ready-distribution.svg",
        "figures/reduction-ci.svg",
        "figures/latency-cdf.svg",
    } <= names
    assert all(p.stat().st_size > 0 for p in paths)
    assert len(pd.read_csv(out / "rounds.csv")) == 51
    assert len(pd.read_csv(out / "rounds_analysed.csv")) == 49
    assert len(pd.read_csv(out / "pods.csv")) == 25 * (20 + 50) + 20
    document = _strict_json((out / "report.json").read_text())
    assert isinstance(document, dict)
    assert document["run_id"] == "sweep-20251201-0001"
    assert len(document["rounds"]) == 51


def test_json_comparisons_are_the_model_and_speak_analyze(
    model: ReportModel, written: tuple[Path, list[Path]]
) -> None:
    out, _ = written
    document = json.loads((out / "report.json").read_text())
    assert len(document["comparisons"]) == len(model.comparisons)
    analyze_keys = {
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
    for mine, c in zip(document["comparisons"], model.comparisons, strict=True):
        assert analyze_keys <= set(mine)
        assert (mine["arm"], mine["size"], mine["metric"]) == (c.arm, c.size, c.metric)
        assert mine["pct_ci"] == pytest.approx(list(c.pct_ci or ()))
        assert mine["p_adjusted"] == pytest.approx(c.p_adjusted)
    csv = pd.read_csv(out / "comparisons.csv")
    assert len(csv) == len(model.comparisons)
    lows = [c.pct_ci[0] if c.pct_ci else None for c in model.comparisons]
    assert csv["pct_ci_lo"].to_numpy() == pytest.approx(lows)


def test_analysed_rounds_csv_reproduces_the_comparisons(
    model: ReportModel, written: tuple[Path, list[Path]]
) -> None:
    out, _ = written
    rounds = load_rounds_csv(out / "rounds_analysed.csv")
    again = compare(rounds, baseline="baseline", metric="batch_ready_s")
    mine = model.comparisons_for("batch_ready_s")
    assert [(c.arm, c.size) for c in again] == [(c.arm, c.size) for c in mine]
    for a, b in zip(again, mine, strict=True):
        assert a.savings_ci == pytest.approx(b.savings_ci)
        assert a.pct_ci == pytest.approx(b.pct_ci)
        assert a.p_adjusted == pytest.approx(b.p_adjusted)


def test_markdown_and_html_carry_the_same_tables(model: ReportModel) -> None:
    tables = build_tables(model)
    markdown = render_markdown(model)
    html = render_html(model)
    every = [
        *tables.per_arm,
        *tables.savings,
        *tables.attribution,
        *tables.more,
        *tables.two_way,
        *tables.time_went,
        tables.acceptance,
        tables.environment,
    ]
    for table in (tables.combined, tables.excluded, tables.stages, tables.restarts, tables.events):
        assert table is not None
        every.append(table)
    for table in every:
        assert f"### {table.title}" in markdown
        assert f'id="{table.key}"' in html
        for row in table.rows:
            assert row[0] in markdown
    assert html.count("<table>") == len(every)
    assert "(n=4)" in markdown and "(n=4)" in html  # the arm that lost a rejected round
    header = "| Arm | 20 pods | 50 pods |"
    assert header in markdown  # the article's shape: arms down, batch sizes across


def test_html_is_one_self_contained_file(written: tuple[Path, list[Path]]) -> None:
    out, _ = written
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert html.count("<svg") == 3 and html.count("</svg>") == 3
    for key in ("batch-ready-distribution", "reduction-ci", "latency-cdf"):
        assert f'id="fig-{key}"' in html
    assert "<style>" in html
    assert not EXTERNAL.search(html)
    assert "<script" not in html and "<link" not in html and "<img" not in html
    # Nothing in this fixture's text is a URL either, so no URL at all may appear.
    assert "http://" not in html and "https://" not in html
    # Ids are salted per figure: no id repeats across the embedded SVGs.
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_markdown_links_standalone_svg_figures(written: tuple[Path, list[Path]]) -> None:
    out, _ = written
    markdown = (out / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert links == [
        "figures/batch-ready-distribution.svg",
        "figures/reduction-ci.svg",
        "figures/latency-cdf.svg",
    ]
    for link in links:
        svg = (out / link).read_text()
        assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')


def test_undefined_template_variables_raise(model: ReportModel) -> None:
    assert environment(html=True).undefined is jinja2.StrictUndefined
    assert environment(html=False).undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        render_template("report.md.j2")
    with pytest.raises(jinja2.UndefinedError):
        render_template("report.html.j2", model=model, figures=[], summary="")  # no tables


def test_html_escapes_stored_text(store: Store) -> None:
    run_id = build_sweep(store)
    store.update("runs", {"id": run_id}, {"stop_reason": "<script>alert(1)</script>"})
    html = render_html(build_model(store, run_id))
    assert "<script>" not in html and "&lt;script&gt;" in html


# --------------------------------------------------------------------------- the command


def _db(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        build_sweep(store)
    return path


def test_cli_writes_the_asked_formats(tmp_path: Path) -> None:
    db = _db(tmp_path)
    out = tmp_path / "rep"
    args = ["report", "sweep-20251201-0001", "--db", str(db), "--out", str(out), "-f", "md,json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    assert str(out) in result.output
    assert sorted(p.name for p in out.iterdir()) == ["figures", "report.json", "report.md"]


def test_cli_default_folder_and_abtest_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABTEST_DB", str(_db(tmp_path)))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "sweep-20251201-0001"])
    assert result.exit_code == 0, (result.output, result.exception)
    folder = tmp_path / "reports" / "sweep-20251201-0001"
    assert {"report.md", "report.html", "report.json", "comparisons.csv"} <= {
        p.name for p in folder.iterdir()
    }
    assert "reports/sweep-20251201-0001" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "no run 'nope'"),
        (["sweep-20251201-0001", "-f", "pdf"], "unknown report format 'pdf'"),
        (["sweep-20251201-0001", "--baseline", "x"], "no arm 'x'"),
    ],
)
def test_cli_user_errors(tmp_path: Path, args: list[str], message: str) -> None:
    db = _db(tmp_path)
    result = CliRunner().invoke(app, ["report", *args, "--db", str(db)])
    assert isinstance(result.exception, UserError)
    assert message in str(result.exception)


def test_cli_missing_database_and_exit_code(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite"
    result = CliRunner().invoke(app, ["report", "r1", "--db", str(missing)])
    assert isinstance(result.exception, UserError)
    assert not missing.exists()  # a report never creates a database
    db = _db(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "abtest", "report", "nope", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "no run 'nope'" in done.stderr


def test_a_run_without_rounds_still_renders(store: Store, tmp_path: Path) -> None:
    store.insert(
        "runs",
        {"id": "empty", "kind": "sweep", "created_at": "2025-12-01T10:00:00Z", "status": "running"},
    )
    store.insert(
        "arms", {"run_id": "empty", "name": "baseline", "on_json": [], "settings_json": {}}
    )
    model = build_model(store, "empty")
    assert model.comparisons == () and "the run has no rounds yet" in model.notes
    paths = write_report(model, tmp_path / "empty")
    names = {p.name for p in paths}
    assert {"report.md", "report.html", "report.json", "environment.csv"} <= names
    assert "<svg" not in (tmp_path / "empty" / "report.html").read_text()
