"""Shared terminal output: JSON to stdout, rich tables for people.

A table wider than the terminal (80 columns in a pipe) is not squeezed into columns a few
characters wide, which splits names and intervals over several lines: it is printed as one
block per row instead, the row's first cell as the heading and every other cell on its own
``column: value`` line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def _cells(row: Sequence[Any]) -> list[str]:
    return ["" if v is None else str(v) for v in row]


def table_width(table: Table, out: Console) -> int:
    """The width the table needs to print every cell on one line."""
    unbounded = out.options.update(max_width=10_000)
    return Measurement.get(out, unbounded, table).maximum


def print_table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], out: Console | None = None
) -> None:
    out = out or console
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
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
    out.print(title, highlight=False, markup=False)
    label_width = max((len(c) for c in columns[1:]), default=0)
    for row in rows:
        cells = _cells(row)
        out.print(f"  {cells[0]}", highlight=False, markup=False, style="bold")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, min_width=label_width)
        grid.add_column(overflow="fold")
        for column, value in zip(columns[1:], cells[1:], strict=True):
            if value:
                grid.add_row(f"    {column}", value)
        out.print(grid, highlight=False)
