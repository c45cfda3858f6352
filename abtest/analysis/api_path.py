"""The kubelet's way to the API server in a report's Method: the delay the lab's latency
proxy added (`lab up --api-latency`, recorded in the run's environment at its start as
``api_latency``) and the round trip the kubelet saw per verb, from the per-round deltas of
its own ``rest_client_request_duration_seconds``; the proxy's connection cuts (`--api-faults`,
``api_faults``) and the share of the kubelet's status writes (PATCH) that failed, from its
``rest_client_requests_total`` by code. A figure of the setting alone would say what was
asked; the kubelet's own counts say what it got (the API server's and etcd's time on the
node's cores comes on top; a retry gate measured where no write failed measures nothing).
Medians and counts only; no intervals.

A run whose kubelet reached the API server through the lab's proxy gets the line at 0 ms too
(a control run at 0 ms is what a delayed run is compared with: both say the same things). A run
with no proxy recorded (not the lab, or a lab from before the proxy) and no failed write gets
no line: its kubelet's round trip is in the kubelet stage table as for any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from abtest.analysis.descriptive import stored_labels
from abtest.analysis.run_data import INCLUDED, RunData

ROUND_TRIP_METRIC = "rest_client_request_duration_seconds"
REQUESTS_METRIC = "rest_client_requests_total"
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


def _included(data: RunData, metric: str) -> pd.DataFrame:
    """The analysed rounds' deltas of one kubelet metric (empty when none were stored)."""
    deltas = data.deltas
    if deltas.empty:
        return deltas
    return deltas[deltas[INCLUDED] & (deltas["metric"] == metric)]


def round_trips(data: RunData) -> tuple[RoundTrip, ...]:
    rows = _included(data, ROUND_TRIP_METRIC)
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


@dataclass(frozen=True)
class FailedWrites:
    """The kubelet's status writes (PATCH requests) on one node over the analysed rounds
    whose metrics were scraped: how many got an error or a non-2xx code, of how many, and
    the median over those rounds of each round's failed share."""

    node: str
    n_rounds: int
    failed: int
    total: int
    median_share: float


def failed_writes(data: RunData) -> tuple[FailedWrites, ...]:
    rows = _included(data, REQUESTS_METRIC)
    if rows.empty:
        return ()
    labels = [stored_labels(t) for t in rows["labels"]]
    patch = [lab.get("method") == "PATCH" for lab in labels]
    if not any(patch):
        return ()
    keyed = pd.DataFrame(
        {
            "round_id": rows["round_id"].to_numpy(),
            "failed": [not lab.get("code", "").startswith("2") for lab in labels],
            "count": pd.to_numeric(rows["delta_count"], errors="coerce").fillna(0).to_numpy(),
        }
    )[patch]
    keyed["failed_count"] = keyed["count"].where(keyed["failed"], 0.0)
    per_round = keyed.groupby("round_id")[["failed_count", "count"]].sum()
    per_round = per_round[per_round["count"] > 0]
    per_round["share"] = per_round["failed_count"] / per_round["count"]
    node_of = dict(zip(data.rounds["id"], data.rounds["node_name"].astype(str), strict=True))
    per_round["node"] = [node_of.get(rid, "") for rid in per_round.index]
    return tuple(
        FailedWrites(
            str(node),
            len(group),
            int(group["failed_count"].sum()),
            int(group["count"].sum()),
            float(group["share"].median()),
        )
        for node, group in per_round.groupby("node", sort=True)
    )


def api_path_method(data: RunData) -> tuple[str, ...]:
    """One Method line per node whose kubelet reached the API server through the lab's
    proxy (with a delay, faults or neither; or whose proxy could not be read at the run's
    start), or whose status writes failed in an analysed round."""
    envs = data.env.get("nodes")
    per_node = envs if isinstance(envs, dict) and envs else {"": data.env}
    trips, failures = round_trips(data), failed_writes(data)
    lines = []
    for name, env in sorted(per_node.items()):
        env = env if isinstance(env, dict) else {}
        node = name or _node_name(data)
        alone = not name and len(per_node) == 1
        failed = next((f for f in failures if f.node == node or alone), None)
        texts = [
            text
            for text in (_setting_text(env.get("api_latency")), _faults_text(env.get("api_faults")))
            if text is not None
        ]
        if texts:
            mine = [t for t in trips if t.node == node or alone]
            texts[-1] += "." + _trips_text(mine)
        if texts or (failed is not None and failed.failed):
            texts.append(_failed_text(failed))
        if texts:
            where = f" on {node}" if node else ""
            # "API path: the kubelet reached ... The proxy cut ...": later sentences capitalized
            said = [_sentence(t if i == 0 else t[:1].upper() + t[1:]) for i, t in enumerate(texts)]
            lines.append(f"API path{where}: " + " ".join(said))
    return tuple(lines)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith(".") else text + "."


def _faults_text(setting: Any) -> str | None:
    kib = setting.get("cut_after_kib") if isinstance(setting, dict) else None
    if not isinstance(kib, int) or kib <= 0:
        return None
    return (
        f"the proxy cut each kubelet connection after {kib} KiB of its requests (--api-faults), "
        "failing what was in flight on it"
    )


def _failed_text(failed: FailedWrites | None) -> str:
    if failed is None:
        return "Failed status writes: not recorded (no scrape of the kubelet's metrics)."
    return (
        f"Failed status writes: {failed.median_share:.1%} of the kubelet's PATCH requests in "
        f"the median round got an error or a non-2xx code ({failed.failed} of {failed.total} "
        f"over {failed.n_rounds} analysed round{'s' if failed.n_rounds != 1 else ''}, "
        f"from its {REQUESTS_METRIC})."
    )


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
        if not setting.get("through"):
            return None
        return (
            "the kubelet reached the API server through the lab's proxy adding no delay "
            "(--api-latency 0); the pod generator and watcher used the direct path"
        )
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
