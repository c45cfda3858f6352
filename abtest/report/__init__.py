"""Renders what ``abtest.analysis`` computed: Markdown, HTML (with SVG plots), CSV, JSON.

    model = build_model(store, run_id)          # abtest.app.report: stats on the stored rounds
    write_report(model, Path("reports/RUN"))    # report.md, report.html, *.csv, report.json

or one format at a time: ``render_markdown(model)``, ``render_html(model)``,
``frames(model)`` (tidy CSV frames), ``to_json(model)``; figures: ``render_figures(model)``.
"""

from abtest.analysis.report_model import ReportModel
from abtest.report.fmt import Table
from abtest.report.html import render_html
from abtest.report.markdown import render_markdown
from abtest.report.plots import Figure, render_figures
from abtest.report.tables import ReportTables, build_tables
from abtest.report.tidy import frames, to_json, write_csv, write_json
from abtest.report.writer import FORMATS, write_report

__all__ = [
    "FORMATS",
    "Figure",
    "ReportModel",
    "ReportTables",
    "Table",
    "build_tables",
    "frames",
    "render_figures",
    "render_html",
    "render_markdown",
    "to_json",
    "write_csv",
    "write_json",
    "write_report",
]
