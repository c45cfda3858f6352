"""`abtest gates`: list a catalog's factors, or sweep them on a node."""

from __future__ import annotations

from dataclasses import asdict

import typer

from abtest.catalog import load_catalog
from abtest.cli.render import print_json, print_table
from abtest.errors import NotBuiltError


def gates(
    names: list[str] = typer.Argument(None, help="Limit the sweep to these factors."),
    list_: bool = typer.Option(False, "--list", help="List the catalog's factors and exit."),
    catalog: str = typer.Option(None, "--catalog", help="agc, lab or a path to a catalog YAML."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    all_: bool = typer.Option(False, "--all", help="Baseline + each factor alone + combined."),
) -> None:
    """List factors (--list) or measure them on a node (--all, or NAME...)."""
    if list_:
        _list(catalog or "agc", json_out)
        return
    raise NotBuiltError("the sweep (abtest gates --all) has not landed yet", "abtest gates")


def _list(catalog_name: str, json_out: bool) -> None:
    cat = load_catalog(catalog_name)
    if json_out:
        print_json([{**asdict(f), "path": f.path} for f in cat.factors])
        return
    print_table(
        f"catalog {cat.name} ({cat.source})",
        ["name", "kind", "on", "off", "summary"],
        [(f.name, f.kind, f.on, f.off, f.summary) for f in cat.factors],
    )
