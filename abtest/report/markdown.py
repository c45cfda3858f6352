"""Markdown report: the same tables as the HTML; figures are linked SVG files beside it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from abtest.analysis.report_model import ReportModel
from abtest.report.plots import Figure
from abtest.report.render import render_template
from abtest.report.tables import build_tables


@dataclass(frozen=True)
class LinkedFigure:
    key: str
    title: str
    caption: str
    path: str  # relative to the Markdown file


def summary_line(model: ReportModel) -> str:
    """Run, catalog, design, blocks and sizes, dates: the line under the title."""
    run = model.run
    parts = [
        f"{run.get('kind')} run",
        f"catalog {run.get('catalog_name')}" if run.get("catalog_name") else "",
        f"design {run.get('design')}" if run.get("design") else "",
        f"{len(model.arms)} arms",
        f"{model.blocks} block{'s' if model.blocks != 1 else ''}" if model.blocks else "",
        "sizes " + ", ".join(str(s) for s in model.sizes) + " pods" if model.sizes else "",
        f"status {run.get('status')}",
        f"{run.get('created_at')} to {run.get('finished_at') or 'unfinished'}",
    ]
    return "; ".join(p for p in parts if p) + "."


def render_markdown(model: ReportModel, figures: Sequence[tuple[Figure, str]] = ()) -> str:
    """The Markdown report. ``figures``: (figure, path of its SVG file relative to the report)
    pairs to link; without them the report has the tables only."""
    linked = [LinkedFigure(f.key, f.title, f.caption, path) for f, path in figures]
    return render_template(
        "report.md.j2",
        model=model,
        t=build_tables(model),
        figures=linked,
        summary=summary_line(model),
    )
