"""HTML report: one self-contained file (inline CSS, SVG figures embedded, no external URL)."""

from __future__ import annotations

from collections.abc import Sequence

from abtest.analysis.report_model import ReportModel
from abtest.report.markdown import summary_line
from abtest.report.plots import Figure, render_figures
from abtest.report.render import render_template
from abtest.report.tables import build_tables


def render_html(model: ReportModel, figures: Sequence[Figure] | None = None) -> str:
    """The HTML report; ``figures`` defaults to :func:`render_figures` of the model."""
    return render_template(
        "report.html.j2",
        model=model,
        t=build_tables(model),
        figures=list(render_figures(model) if figures is None else figures),
        summary=summary_line(model),
    )
