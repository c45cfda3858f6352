"""`abtest lab`: placeholder until its capability lands."""

from __future__ import annotations

import typer

from abtest.errors import NotBuiltError

app = typer.Typer(help="(not built yet)", no_args_is_help=True)


@app.callback(invoke_without_command=True)
def _pending() -> None:
    raise NotBuiltError("abtest lab has not landed yet", "abtest lab")
