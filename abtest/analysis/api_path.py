"""The kubelet's way to the API server in a report's Method: the delay the lab's latency
proxy added (`lab up --api-latency`, recorded in the run's environment at its start as
``api_latency``) and the round trip the kubelet saw per verb, from the per-round deltas of
its own ``rest_client_request_duration_seconds``. A figure of the setting alone would say
what was asked; the kubelet's own round trip says what it got (the API server's and etcd's
time on the node's cores comes on top). Medians only; no intervals.

A run with no proxy delay (the default: no ``api_latency`` in its environment, or 0 ms)
gets no line: its kubelet's round trip is in the kubelet stage table as for any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from abtest.analysis.descriptive import stored_labels
from abtest.analysis.run_data import INCLUDED, RunData

ROUND_TRIP_METRIC = "rest_client_request_duration_seconds"
#: the verbs of a pod's life first (status PATCH and GET, lease PUT, event POST), then others
VERB_ORDER = ("PATCH", "GET", "PUT", "POST", "DELETE")


@dataclass(frozen=True)
class RoundTrip:
    """One verb's round trip on one node: each analysed round's mean (its delta of the
    histogram's sum over its count, hosts summed), the median over those rounds."""

    node: str
    verb: str
    n_rounds: int
    median_s: float


def round_trips(data: RunData) -> tuple[RoundTrip, ...]:
    deltas = data.deltas
    if deltas.empty:
        return ()
    rows = deltas[deltas[INCLUDED] & (deltas["metric"] == ROUND_TRIP_METRIC)]
    if rows.empty:
        return ()
    node_of = data.rounds.set_index("id")["node_name"].astype(str)
    keyed = pd.DataFrame(
        {
            "round_id": rows["round_id"].to_numpy(),
            "verb": [stored_labels(t).get("verb", "") for t in rows["labels"]],
            "sum": pd.to_numeric(rows["delta_sum"], errors="coerce").to_numpy(),
            "count": pd.to_numeric(rows["delta_count"], errors="coerce").to_numpy(),
        }
    )
    per_round = keyed.groupby(["round_id", "verb"], sort=False)[["sum", "count"]].sum()
    per_round = per_round[per_round["count"] > 0]
    means = (per_round["sum"] / per_round["count"]).rename("mean_s").reset_index()
    means["node"] = means["round_id"].map(node_of)
    out = [
        RoundTrip(str(node), str(verb), int(values.size), float(values.median()))
        for (node, verb), values in means.dropna().groupby(["node", "verb"])["mean_s"]
    ]
    rank = {v: i for i, v in enumerate(VERB_ORDER)}
    out.sort(key=lambda r: (r.node, rank.get(r.verb, len(rank)), r.verb))
    return tuple(out)


def api_path_method(data: RunData) -> tuple[str, ...]:
    """One Method line per node whose kubelet reached the API server through the lab's
    latency proxy with a delay set (or whose proxy could not be read at the run's start)."""
    envs = data.env.get("nodes")
    per_node = envs if isinstance(envs, dict) and envs else {"": data.env}
    trips = round_trips(data)
    lines = []
    for name, env in sorted(per_node.items()):
        setting = env.get("api_latency") if isinstance(env, dict) else None
        text = _setting_text(setting)
        if text is None:
            continue
        node = name or _node_name(data)
        mine = [t for t in trips if t.node == node or (not name and len(per_node) == 1)]
        where = f" on {node}" if node else ""
        lines.append(f"API path{where}: {text}.{_trips_text(mine)}")
    return tuple(lines)


def _node_name(data: RunData) -> str:
    nodes = sorted({str(n) for n in data.rounds["node_name"]}) if len(data.rounds) else []
    return nodes[0] if len(nodes) == 1 else str(data.run.get("node_name") or "")


def _setting_text(setting: Any) -> str | None:
    if not isinstance(setting, dict):
        return None
    if "error" in setting:
        return (
            "the kubelet reached the API server through the lab's latency proxy, whose setting "
            f"could not be read at the run's start ({setting['error']})"
        )
    ms, jitter = _ms(setting.get("ms")), _ms(setting.get("jitter_ms"))
    if not ms and not jitter:
        return None
    return (
        f"the kubelet reached the API server through a latency proxy adding {ms:g} ms "
        f"(jitter {jitter:g} ms) to each response, as set at the run's start; the pod "
        "generator and watcher used the direct path"
    )


def _ms(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def _trips_text(trips: list[RoundTrip]) -> str:
    if not trips:
        return " The kubelet's own round trip was not recorded (no scrape of its metrics)."
    verbs = ", ".join(f"{t.verb} {t.median_s * 1000:.3g} ms" for t in trips)
    n = max(t.n_rounds for t in trips)
    over = (
        "its one analysed round's mean"
        if n == 1
        else (f"each round's mean, the median over up to {n} analysed rounds of every arm")
    )
    return (
        f" The round trip the kubelet saw, per verb (its {ROUND_TRIP_METRIC}, {over}): "
        f"{verbs}; per arm in the kubelet stage table."
    )
