"""Writes a report's files into one folder: report.md (+ figures/*.svg), report.html, *.csv,
report.json."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from abtest.analysis.report_model import ReportModel
from abtest.config.paths import output_subdir, write_output
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


def write_report(
    model: ReportModel, out_dir: Path, formats: Sequence[str] = FORMATS, flag: str = "--out"
) -> list[Path]:
    """Render ``formats`` of ``model`` into ``out_dir`` (created); the paths written. Each
    file replaces only a regular file, atomically (abtest.config.paths.write_output; a link,
    device or FIFO in its place is a UserError naming ``flag``)."""
    chosen = check_formats(formats)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    figures = render_figures(model) if {"md", "html"} & set(chosen) else ()
    for name in chosen:
        if name == "html":
            written.append(write_output(out_dir / "report.html", render_html(model, figures), flag))
        elif name == "md":
            linked = []
            if figures:
                output_subdir(out_dir, FIGURES_DIR, flag)
            for figure in figures:
                svg_path = out_dir / FIGURES_DIR / f"{figure.key}.svg"
                written.append(write_output(svg_path, standalone_svg(figure.svg), flag))
                linked.append((figure, f"{FIGURES_DIR}/{figure.key}.svg"))
            md = render_markdown(model, linked)
            written.append(write_output(out_dir / "report.md", md, flag))
        elif name == "csv":
            written.extend(write_csv(model, out_dir, flag))
        elif name == "junit":
            junit = render_junit(model)
            written.append(write_output(out_dir / "report.junit.xml", junit, flag))
        else:
            written.append(write_json(model, out_dir / "report.json", flag))
    return written
