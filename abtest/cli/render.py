"""Shared terminal output: JSON to stdout, rich tables for people.

A table wider than the terminal (80 columns in a pipe) is not squeezed into columns a few
characters wide, which splits names and intervals over several lines: it is printed as one
block per row instead, the row's first cell as the heading and every other cell on its own
``column: value`` line.

Every string these consoles print, in a table or not, goes through
:func:`abtest.cli.terminal.visible` (:class:`TextConsole`): stored and imported text is shown
as text, never as markup, an escape sequence or a character the terminal cannot take. A
style is given with ``style=`` or :func:`styled`, never as markup in the string.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from abtest.cli.terminal import sane_terminal_env, visible

if TYPE_CHECKING:
    from rich.console import HighlighterType, JustifyMethod, OverflowMethod
    from rich.style import Style


class TextConsole(Console):
    """A rich console that reads no markup or emoji codes in any string it is given and shows
    every string through :func:`visible` (for its own output's encoding)."""

    def __init__(self, *, stderr: bool = False) -> None:
        sane_terminal_env()  # before rich reads COLUMNS: 0 would be a width of 0
        super().__init__(stderr=stderr, markup=False, emoji=False)

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: HighlighterType | None = None,
    ) -> Text:
        # markup and emoji off whatever a caller asks: a string is never read as either
        return super().render_str(
            visible(text, encoding=self.encoding),
            style=style,
            justify=justify,
            overflow=overflow,
            emoji=False,
            markup=False,
            highlight=highlight,
            highlighter=highlighter,
        )


console = TextConsole()
err_console = TextConsole(stderr=True)


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line from pieces, each plain or ``(text, style)``: the way to color a part of a
    line that holds data (a rich Text is printed as it is, so each piece is made visible)."""
    out = Text()
    for part in parts:
        text, style = (part, "") if isinstance(part, str) else part
        out.append(visible(text, lines=False), style=style)
    return out


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Plain text (Markdown, a plan) to stdout or stderr as it is, unwrapped for a pipe,
    shown through :func:`visible` for that stream's encoding."""
    stream = sys.stderr if err else sys.stdout
    stream.write(visible(text, encoding=getattr(stream, "encoding", None)) + ("\n" if nl else ""))
    stream.flush()


def progress(line: str) -> None:
    """A live measurement's progress line (regress, bisect): on stderr, so that stdout holds
    only the verdict or the JSON; printed as it is, unhighlighted."""
    err_console.print(line, highlight=False)


def print_json(data: Any) -> None:
    # ASCII JSON: every control character and non-ASCII code point is a \u escape
    print(json.dumps(data, indent=2, sort_keys=False, default=str, ensure_ascii=True))


def _cells(row: Sequence[Any]) -> list[str]:
    """One-line cells: a line break stored in a value is shown as ``\\n``, not obeyed."""
    return ["" if v is None else visible(str(v), lines=False) for v in row]


def table_width(table: Table, out: Console) -> int:
    """The width the table needs to print every cell on one line."""
    unbounded = out.options.update(max_width=10_000)
    return Measurement.get(out, unbounded, table).maximum


def print_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], out: Console | None = None
) -> None:
    out = out or console
    table = Table(title=visible(title, lines=False), title_justify="left")
    for col in columns:
        table.add_column(visible(col, lines=False), overflow="fold")
    for row in rows:
        table.add_row(*_cells(row))
    if len(columns) <= 2 or table_width(table, out) <= out.width:
        out.print(table)
        return
    print_blocks(title, columns, rows, out)


def print_blocks(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], out: Console | None = None
) -> None:
    """One block per row: the first cell as a heading, then ``column  value`` lines."""
    out = out or console
    out.print(visible(title, lines=False), highlight=False, markup=False)
    label_width = max((len(c) for c in columns[1:]), default=0)
    for row in rows:
        cells = _cells(row)
        out.print(f"  {cells[0]}", highlight=False, markup=False, style="bold")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, min_width=label_width)
        grid.add_column(overflow="fold")
        for column, value in zip(columns[1:], cells[1:], strict=True):
            if value:
                grid.add_row(visible(f"    {column}", lines=False), value)
        out.print(grid, highlight=False)
