"""The fleet tables: per-node savings and the node x arm interaction, from the fleet model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from abtest.analysis.fleet import FLEET_METRICS, FleetReport, NodeComparison
from abtest.report.fmt import DASH, Table, make_table, num, p_value, with_ci

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats.fleet import NodeInteraction


LABELS = {"batch_ready_s": "Batch ready time", "p95_s": "P95 per-pod latency"}


def fleet_tables(fleet: FleetReport | None, baseline: str | None, ci: str) -> tuple[Table, ...]:
    """Per metric: the per-node savings table, then the node x arm interaction table."""
    if fleet is None:
        return ()
    tables = []
    for metric in FLEET_METRICS:
        own = [nc for nc in fleet.per_node if nc.comparison.metric == metric]
        if own:
            tables.append(_per_node(own, metric, baseline, ci))
        inter = [i for i in fleet.interactions if i.metric == metric]
        if inter:
            tables.append(_interaction(inter, metric, ci))
    return tuple(tables)


def _per_node(own: list[NodeComparison], metric: str, baseline: str | None, ci: str) -> Table:
    rows = []
    for nc in sorted(own, key=lambda x: (x.comparison.size, x.node)):
        c = nc.comparison
        pairs = f" ({c.n_pairs} pairs)" if c.method == "paired" else f" ({c.method})"
        rows.append(
            [
                str(c.size),
                nc.node,
                c.arm,
                num(c.baseline_mean_matched),
                num(c.treatment_mean_matched),
                with_ci(c.savings_s, c.savings_ci, c.savings_note, 3, sign=True),
                with_ci(c.pct_reduction, c.pct_ci, c.pct_note, 1, sign=True),
                p_value(c.p_adjusted),
                f"{c.n_baseline}/{c.n_treatment}{pairs}",
            ]
        )
    return make_table(
        key=f"per-node-{metric.removesuffix('_s').replace('_', '-')}",
        title=f"{LABELS[metric]} per node: savings and percent reduction vs {baseline}",
        columns=[
            "Pods",
            "Node",
            "Arm",
            f"{baseline} s",
            "Arm s",
            f"Saving s [{ci} CI]",
            f"Reduction % [{ci} CI]",
            "p (Holm)",
            "n base/arm",
        ],
        rows=rows,
        left=3,
        notes=[
            "Each node on its own, paired by block within the node; Holm over the arms vs "
            "the baseline at each size on that node. The pooled tables above use every node's "
            "blocks (a block there is a node/block pair)."
        ],
    )


def _interaction(inter: list[NodeInteraction], metric: str, ci: str) -> Table:
    rows = []
    for i in inter:
        if not i.contrasts:
            rows.append([str(i.size), i.arm, DASH, DASH, DASH, DASH, DASH, DASH, i.note])
            continue
        for c in i.contrasts:
            rows.append(
                [
                    str(i.size),
                    i.arm,
                    f"{c.node} ({c.n_pairs})",
                    ", ".join(c.rest) + f" ({c.n_pairs_rest})",
                    with_ci(c.pct_difference, c.pct_difference_ci, "", 1, sign=True),
                    p_value(c.p_value),
                    p_value(c.p_adjusted),
                    p_value(i.p_value),
                    i.note,
                ]
            )
    methods = sorted({i.method for i in inter if i.contrasts})
    return make_table(
        key=f"node-interaction-{metric.removesuffix('_s').replace('_', '-')}",
        title=f"{LABELS[metric]}: does the effect differ between nodes? (node x arm)",
        columns=[
            "Pods",
            "Arm",
            "Node (blocks)",
            "vs (blocks)",
            f"Difference % [{ci} CI]",
            "p",
            "p (Holm)",
            "p (same on all)",
            "Note",
        ],
        rows=rows,
        left=4,
        notes=[
            "Difference: the arm's time relative to the baseline (T/B, per-block log ratio "
            "within the node) on this node divided by the same on the other node(s), minus 1, "
            "in %: +5 means the arm is 5 % slower relative to its baseline here than there; "
            "0 in the interval: no evidence the effect differs.",
            "Method: " + "; ".join(methods) + " (Welch-Satterthwaite t on each node's own SD "
            "of its per-block log ratios, so a noisy node does not borrow a quiet one's "
            "precision). p (same on all): Welch's test that every node has the same effect."
            if methods
            else "",
        ],
    )
