"""`abtest runs`: the stored runs, newest first; `abtest runs show RUN`: one run in detail;
`abtest runs export/import`: move runs between databases (a laptop's file, the team's server)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from abtest.app.runs import export_to_file, import_from_file, stored_runs
from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.results import records

app = typer.Typer(
    help="Stored runs, newest first; `abtest runs show RUN` for one run.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback()
def runs(ctx: typer.Context, json_out: o.Json = False, db: o.Db = None) -> None:
    """List the stored runs, newest first, with their rounds (accepted / all)."""
    if ctx.invoked_subcommand is not None:
        return
    with stored_runs(db) as res, res.snapshot():
        rows = records(res.runs())
        path = res.path
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
    console.print("one run in detail: abtest runs show RUN", highlight=False)


@app.command("show")
def show(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id from `abtest runs`.")],
    json_out: o.Json = False,
    db: o.Db = None,
) -> None:
    """One run: status, node, playbook, arms with their settings, sizes, blocks done of
    planned, rounds per arm and size, and where its report is."""
    with stored_runs(db) as res:
        detail = res.detail(run_id).to_dict()
    if json_out:
        print_json(detail)
        return
    _print_detail(detail)


def _print_detail(d: dict[str, Any]) -> None:
    planned = d["blocks_planned"]
    blocks = f"{d['blocks_with_rounds']}" + (f" of {planned} planned" if planned else "")
    report = d["report"]
    where = (
        f"{report['directory']}/ ({', '.join(report['files'])})"
        if report["files"]
        else f"not rendered here yet: {report['render']}"
    )
    print_table(
        f"run {d['id']}",
        ["", ""],
        [
            (
                "kind / status",
                f"{d['kind']} / {d['status']}"
                + (f" ({d['stop_reason']})" if d["stop_reason"] else ""),
            ),
            ("created / finished", f"{d['created_at']} / {d['finished_at'] or '-'}"),
            ("nodes", ", ".join(d["nodes"]) or "-"),
            ("playbook / design", f"{d['playbook'] or '-'} / {d['design'] or '-'}"),
            ("sizes", ", ".join(map(str, d["sizes"])) or "-"),
            ("blocks with rounds", blocks),
            ("report", where),
            ("command", d["command"] or "-"),
        ],
    )
    if d["arms"]:
        print_table(
            "arms",
            ["arm", "settings", "status"],
            [
                (
                    a["name"],
                    _settings(a["settings"]),
                    a["status"] + (f": {a['failure']}" if a["failure"] else ""),
                )
                for a in d["arms"]
            ],
        )
    if d["rounds"]:
        print_table(
            "rounds (warm-ups left out)",
            ["arm", "size", "accepted / all"],
            [(r["arm"], r["size"], f"{r['accepted']}/{r['rounds']}") for r in d["rounds"]],
        )


def _settings(settings: Any) -> str:
    if not isinstance(settings, dict):  # junk left by a hand edit: shown as stored
        return f"(not a JSON object: {str(settings)[:60]!r})"
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "(node as is)"


@app.command("export")
def export(
    run_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="[RUN]...", help="Run ids; default: every run in the database."),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="The file to write (JSON): a new or regular file, never a link."
        ),
    ] = Path("runs.json"),
    db: o.Db = None,
) -> None:
    """Write runs (every row they own: arms, visits, rounds, pods, events, metrics) to a
    file that `abtest runs import` reads into another database, e.g. the team's."""
    o.check_output_file(out, "--out")  # before the database is read
    count = export_to_file(db, run_ids, out)
    console.print(f"{count} run(s) written to {out}", highlight=False)


@app.command("import")
def import_(
    source: Annotated[Path, typer.Argument(metavar="FILE", help="A `runs export` file.")],
    db: o.Db = None,
) -> None:
    """Add the file's runs to the database, all or none: the file is checked against the
    database's schema first (one error line per bad value, naming its JSON path), and a run
    id the database already has refuses the file (a stored run is never changed)."""
    done = import_from_file(db, source)
    for run_id in done.added:
        console.print(f"imported {run_id}", highlight=False)
