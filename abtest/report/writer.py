"""Writes a report's files into one folder: report.md (+ figures/*.svg), report.html, *.csv,
report.json."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from abtest.analysis.model import ReportModel
from abtest.errors import UserError
from abtest.report.html import render_html
from abtest.report.junit_sweep import render_junit
from abtest.report.markdown import render_markdown
from abtest.report.plots import render_figures, standalone_svg
from abtest.report.tidy import write_csv, write_json

FORMATS: tuple[str, ...] = ("md", "html", "csv", "json")
# Written only when asked for (CI wants it, a person reading the report does not).
EXTRA_FORMATS: tuple[str, ...] = ("junit",)
FIGURES_DIR = "figures"


def check_formats(formats: Sequence[str]) -> list[str]:
    """Known formats in the order given, without repeats; UserError for an unknown one."""
    chosen: list[str] = []
    for name in formats:
        name = name.strip().lower()
        if name == "markdown":
            name = "md"
        if name not in FORMATS + EXTRA_FORMATS:
            raise UserError(
                f"unknown report format {name!r}",
                "--format",
                f"use {', '.join(FORMATS + EXTRA_FORMATS)}",
            )
        if name not in chosen:
            chosen.append(name)
    return chosen


def write_report(model: ReportModel, out_dir: Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Render ``formats`` of ``model`` into ``out_dir`` (created); the paths written."""
    chosen = check_formats(formats)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    figures = render_figures(model) if {"md", "html"} & set(chosen) else ()
    for name in chosen:
        if name == "html":
            path = out_dir / "report.html"
            path.write_text(render_html(model, figures), encoding="utf-8")
            written.append(path)
        elif name == "md":
            linked = []
            if figures:
                (out_dir / FIGURES_DIR).mkdir(exist_ok=True)
            for figure in figures:
                svg_path = out_dir / FIGURES_DIR / f"{figure.key}.svg"
                svg_path.write_text(standalone_svg(figure.svg), encoding="utf-8")
                written.append(svg_path)
                linked.append((figure, f"{FIGURES_DIR}/{figure.key}.svg"))
            path = out_dir / "report.md"
            path.write_text(render_markdown(model, linked), encoding="utf-8")
            written.append(path)
        elif name == "csv":
            written.extend(write_csv(model, out_dir))
        elif name == "junit":
            path = out_dir / "report.junit.xml"
            path.write_text(render_junit(model), encoding="utf-8")
            written.append(path)
        else:
            written.append(write_json(model, out_dir / "report.json"))
    return written
