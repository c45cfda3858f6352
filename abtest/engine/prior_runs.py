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
    restarts = store.visits.restart_times(node_name)
    if restarts:
        out["restart_s"] = restarts
    cleanups = store.rounds.cleanup_times(node_name)
    if cleanups:
        out["cleanup_s"] = cleanups
    for size in sizes:
        ready = store.rounds.batch_ready_times(node_name, size)
        if ready:
            out[f"batch_{size}"] = ready
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
    return store.rounds.of_latest_runs(node_name, sizes, METRICS, NOISE_RUNS)
