"""What a node measured before: medians for the duration estimate, and the rounds of its
earlier runs for the noise that planning by power needs (``abtest.stats.power``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from abtest.store.db import Store

if TYPE_CHECKING:
    import pandas as pd

# abtest.stats.frame.METRICS, spelled out: importing abtest.stats loads scipy, which `abtest plan`
# without power planning does not need
METRICS: tuple[str, ...] = ("batch_ready_s", "p50_s", "p95_s", "p99_s")


def node_history(store: Store, node_name: str, sizes: tuple[int, ...]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    restarts = store.query(
        "SELECT restart_to_verified_s FROM visits WHERE node_name = ? AND applied = 1 "
        "AND restart_to_verified_s IS NOT NULL ORDER BY id DESC LIMIT 50",
        (node_name,),
    )
    if restarts:
        out["restart_s"] = [float(r[0]) for r in restarts]
    cleanups = store.query(
        "SELECT cleanup_s FROM rounds WHERE node_name = ? AND cleanup_s IS NOT NULL "
        "ORDER BY id DESC LIMIT 50",
        (node_name,),
    )
    if cleanups:
        out["cleanup_s"] = [float(r[0]) for r in cleanups]
    for size in sizes:
        rows = store.query(
            "SELECT batch_ready_s FROM rounds WHERE node_name = ? AND size = ? AND accepted = 1 "
            "ORDER BY id DESC LIMIT 50",
            (node_name, size),
        )
        if rows:
            out[f"batch_{size}"] = [float(r[0]) for r in rows]
    return out


# Enough earlier runs for a stable noise estimate, few enough that an old node state (another
# kubelet version, other neighbours) does not dominate it.
NOISE_RUNS = 20


def noise_history(store: Store, node_name: str, sizes: tuple[int, ...]) -> pd.DataFrame:
    """Accepted, non-warm-up rounds of the node's latest runs at ``sizes``, in the frame
    ``abtest.stats.power.noise_from_history`` takes (``group`` = run id: blocks pair within a
    run only)."""
    columns = ["group", "block", "arm", "size", *METRICS]
    if not sizes:
        import pandas as pd

        return pd.DataFrame(columns=columns)
    marks = ", ".join("?" for _ in sizes)
    return store.frame(
        f'SELECT run_id AS "group", block, arm, size, {", ".join(METRICS)} FROM rounds '
        f"WHERE node_name = ? AND accepted = 1 AND warmup = 0 AND block IS NOT NULL "
        f"AND size IN ({marks}) AND run_id IN (SELECT run_id FROM rounds WHERE node_name = ? "
        "GROUP BY run_id ORDER BY MAX(id) DESC LIMIT ?) ORDER BY id",
        (node_name, *sizes, node_name, NOISE_RUNS),
    )
