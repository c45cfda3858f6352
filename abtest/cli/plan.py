"""`abtest plan`: what a sweep would do — arms, block schedule, restarts, duration."""

from __future__ import annotations

from pathlib import Path

import typer

from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.experiment.history import node_history
from abtest.experiment.plan import build_plan, estimate, restart_count
from abtest.store.db import Store


def plan(
    names: list[str] = typer.Argument(None, help="Limit to these factors."),
    playbook: str = o.PLAYBOOK,
    profile: list[str] = o.PROFILE,
    catalog: str = o.CATALOG,
    design: str = o.DESIGN,
    attribution: bool = typer.Option(False, "--attribution", help="Add leave-one-out arms."),
    rounds: int = o.ROUNDS,
    sizes: str = o.SIZES,
    seed: int = o.SEED,
    qps: float = o.QPS,
    concurrency: int = o.CONCURRENCY,
    namespace: str = o.NAMESPACE,
    db: Path = o.DB,
    json_out: bool = o.JSON,
) -> None:
    """Print the arms, the block schedule, kubelet restarts and an estimated duration.
    Nothing is touched."""
    opts = o.plan_options(playbook, profile, catalog, names, design, attribution, rounds, sizes,
                          seed, qps, concurrency, namespace)  # fmt: skip
    p = build_plan(opts)
    history = None
    if db is not None or Store.exists():
        with Store(db) as store:
            history = node_history(store, p.profiles[0].node_name, p.schedule.sizes)
    p_est = estimate(p, history)
    if json_out:
        data = p.to_dict()
        data["estimate"] = {
            "seconds": round(p_est.seconds, 1),
            "restart_s": p_est.restart_s,
            "cleanup_s": p_est.cleanup_s,
            "batch_s_by_size": p_est.batch_s_by_size,
            "source": p_est.source,
        }
        print_json(data)
        return
    print_table(
        f"arms ({p.design}, catalog {p.catalog.name})",
        ["arm", "settings"],
        [(a.name, ", ".join(f"{k}={v}" for k, v in a.settings)) for a in p.arms],
    )
    rows = []
    for v in p.schedule.visits:
        warm = " (+warm-up)" if v.warmup else ""
        rows.append((v.block + 1, v.position + 1, v.arm, ", ".join(map(str, v.sizes)) + warm))
    print_table(f"schedule (seed {p.schedule.seed})", ["block", "visit", "arm", "sizes"], rows)
    minutes = p_est.seconds / 60
    nodes = ", ".join(x.node_name for x in p.profiles)
    console.print(
        f"{len(p.schedule.visits)} visits = {restart_count(p)} kubelet restarts, "
        f"{p.schedule.measured_rounds} measured rounds on {nodes}; "
        f"estimated {minutes:.0f} min ({p_est.source})"
    )
