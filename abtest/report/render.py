"""The jinja2 environments of the report: templates from ``abtest/report/templates``, undefined
variables are errors (``StrictUndefined``), HTML autoescaped."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).parent / "templates"


def md_cell(value: object) -> str:
    """A Markdown table cell: no line breaks, pipes escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


@cache
def environment(html: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        autoescape=html,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_cell
    return env


def render_template(name: str, **context: Any) -> str:
    """Render ``templates/name``; ``jinja2.UndefinedError`` for any undefined variable."""
    return environment(name.endswith(".html.j2")).get_template(name).render(**context)
