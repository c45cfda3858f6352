"""`abtest runs`: the stored runs, newest first."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from abtest.cli.render import console, print_json, print_table
from abtest.store.db import Store


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return value


def runs(
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    db: Annotated[
        Path | None, typer.Option("--db", help="Results database (default: ABTEST_DB or XDG).")
    ] = None,
) -> None:
    """List the stored runs, newest first, with their rounds (accepted / all)."""
    with Store(db) as store:
        frame = store.runs_frame()
        path = store.path
    rows = [{k: _clean(v) for k, v in rec.items()} for rec in frame.to_dict(orient="records")]
    if json_out:
        print_json(rows)
        return
    if not rows:
        console.print(f"no runs in {path}", highlight=False)
        return
    print_table(
        f"runs in {path}",
        ["id", "kind", "status", "created", "node", "playbook", "rounds (accepted/all)"],
        [
            (
                r["id"],
                r["kind"],
                r["status"],
                r["created_at"],
                r["node_name"],
                r["playbook_name"] or "-",
                f"{r['accepted']}/{r['rounds']}",
            )
            for r in rows
        ],
    )
