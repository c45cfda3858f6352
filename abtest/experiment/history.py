"""What a node measured before, for estimates: medians from the results database."""

from __future__ import annotations

from abtest.store.db import Store


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
