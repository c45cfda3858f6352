"""`abtest runs`: the stored runs, newest first; `abtest runs show RUN`: one run in detail."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, cast

import pandas as pd
import typer

from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.store.db import Store

app = typer.Typer(
    help="Stored runs, newest first; `abtest runs show RUN` for one run.",
    invoke_without_command=True,
    no_args_is_help=False,
)

REPORTS = Path("reports")  # where `abtest report` writes by default (reports/RUN_ID/)


def _clean(value: Any) -> Any:
    """A JSON-safe scalar: NaN is null, numpy scalars are plain numbers."""
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): _clean(v) for k, v in rec.items()} for rec in frame.to_dict(orient="records")]


@app.callback()
def runs(ctx: typer.Context, json_out: o.Json = False, db: o.Db = None) -> None:
    """List the stored runs, newest first, with their rounds (accepted / all)."""
    if ctx.invoked_subcommand is not None:
        return
    with Store(db) as store:
        rows = _records(store.runs_frame())
        path = store.path
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
    with Store(db) as store:
        detail = run_detail(store, run_id)
    if json_out:
        print_json(detail)
        return
    _print_detail(detail)


def run_detail(store: Store, run_id: str) -> dict[str, Any]:
    """Everything `runs show` prints, as JSON-ready data."""
    row = store.run_row(run_id)
    plan = json.loads(row["plan_json"] or "{}")
    schedule = plan.get("schedule") or {}
    rounds = store.rounds_frame(run_id)
    arms = store.arms_frame(run_id)
    measured = rounds[rounds["warmup"] == 0] if not rounds.empty else rounds
    counts = []
    if not measured.empty:
        grouped = measured.groupby(["arm", "size"], sort=False)["accepted"]
        for key, accepted in grouped:
            arm, size = key
            counts.append(
                {
                    "arm": str(arm),
                    "size": int(cast(int, size)),
                    "rounds": len(accepted),
                    "accepted": int(accepted.sum()),
                }
            )
    blocks_done = sorted({int(b) for b in measured["block"].dropna()}) if not measured.empty else []
    report_dir = REPORTS / run_id
    return {
        "id": row["id"],
        "kind": row["kind"],
        "status": row["status"],
        "stop_reason": row["stop_reason"],
        "created_at": row["created_at"],
        "finished_at": row["finished_at"],
        "node": row["node_name"],
        "nodes": plan.get("nodes") or ([row["node_name"]] if row["node_name"] else []),
        "profile": row["profile_name"],
        "playbook": row["playbook_name"],
        "design": row["design"],
        "seed": _clean(row["seed"]),
        "command": row["command"],
        "arms": [
            {
                "name": a["name"],
                "on": json.loads(a["on_json"] or "[]"),
                "settings": json.loads(a["settings_json"] or "{}"),
                "status": a["status"],
                "failure": a["failure"],
            }
            for a in _records(arms)
        ],
        "sizes": sorted({int(s) for s in rounds["size"]}) if not rounds.empty else [],
        "blocks_planned": _clean(schedule.get("blocks")),
        "blocks_with_rounds": len(blocks_done),
        "rounds": counts,
        "report": {
            "directory": str(report_dir),
            "files": sorted(p.name for p in report_dir.iterdir()) if report_dir.is_dir() else [],
            "render": f"abtest report {run_id} --format html",
        },
    }


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
                    ", ".join(f"{k}={v}" for k, v in a["settings"].items()) or "(node as is)",
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
