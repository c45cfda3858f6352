"""A fleet sweep's section of the report model: every node's own savings beside the pooled ones,
and whether the effect differs between nodes (the node x arm interaction, ``stats.fleet``).

``build_fleet`` calls stats on the stored rounds (as ``analysis.report_model`` does for the pooled
tables); ``abtest.report.tables_fleet`` formats them. The pooled tables stay where they are:
there a block is a (node, block) pair, so every node is its own block factor.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from abtest.analysis.run_data import INCLUDED, RunData
from abtest.errors import UserError
from abtest.stats import Comparison, compare
from abtest.stats.fleet import NODE, NodeInteraction, node_interactions

FLEET_METRICS: tuple[str, ...] = ("batch_ready_s", "p95_s")  # as the report leads with


@dataclass(frozen=True)
class NodeComparison:
    node: str
    comparison: Comparison


@dataclass(frozen=True)
class FleetReport:
    nodes: tuple[str, ...]
    per_node: tuple[NodeComparison, ...]  # each node's own comparisons, paired within it
    interactions: tuple[NodeInteraction, ...]
    notes: tuple[str, ...]


def fleet_frame(data: RunData, metric: str) -> pd.DataFrame:
    """Analysed rounds with their node and their block within that node."""
    rows = data.rounds[data.rounds[INCLUDED] & data.rounds[metric].notna()]
    return pd.DataFrame(
        {
            "arm": rows["arm"].astype(str).to_numpy(),
            "size": rows["size"].astype(int).to_numpy(),
            NODE: rows["node_name"].astype(str).to_numpy(),
            "block": rows["block"].to_numpy(),
            metric: rows[metric].astype(float).to_numpy(),
        }
    )


def build_fleet(
    data: RunData, baseline: str | None, metrics: tuple[str, ...], confidence: float
) -> FleetReport | None:
    """The fleet section of a run measured on several nodes; None for one node."""
    included = data.rounds[data.rounds[INCLUDED]]
    nodes = tuple(sorted({str(n) for n in included["node_name"]}))
    if len(nodes) < 2 or baseline is None:
        return None
    per_node: list[NodeComparison] = []
    interactions: list[NodeInteraction] = []
    notes: list[str] = []
    for metric in (m for m in FLEET_METRICS if m in metrics):
        frame = fleet_frame(data, metric)
        for node in nodes:
            own = frame[frame[NODE] == node].drop(columns=[NODE])
            if not (own["arm"] == baseline).any():
                notes.append(f"{node}: no analysed {baseline} round ({metric})")
                continue
            try:
                found = compare(own, baseline=baseline, metric=metric, confidence=confidence)
            except UserError as exc:
                notes.append(f"{node}: no comparisons of {metric}: {exc.one_line()}")
                continue
            per_node.extend(NodeComparison(node, c) for c in found)
        if (frame["arm"] == baseline).any():
            interactions.extend(
                node_interactions(frame, baseline=baseline, metric=metric, confidence=confidence)
            )
    return FleetReport(nodes, tuple(per_node), tuple(interactions), tuple(dict.fromkeys(notes)))
