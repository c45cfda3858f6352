"""Does an arm's effect differ between nodes? The node x arm interaction of a fleet sweep.

A fleet sweep runs the same randomized block schedule on every node, so each node has its own
blocks and the effect of an arm (vs the baseline, at one size) is measured per block within a
node as the per-block log ratio ``d = log T - log B`` (rounds averaged per block and arm on the
log scale first, as ``stats.contrast`` pairs them). Pairing stays within a node: a block on one
node has nothing to do with the same-numbered block on another.

Method (the node x arm interaction of the model ``log y = block(node) + arm + node:arm + e``)
-----------------------------------------------------------------------------------------
With two arms, that interaction is exactly a one-way analysis of the per-block log ratios by
node: ``d[n, b] = mu + a[n] + e``, ``e ~ N(0, s^2)`` with one error variance for the fleet
(the nodes of one pool run the same build on the same hardware class; the pooled variance is
what makes 2 blocks per node usable at all: every node's blocks add to its degrees of freedom).

- Heterogeneity: the F-test of "every node has the same effect", ``F = [sum_n n_n (dbar_n -
  dbar)^2 / (k - 1)] / s^2`` on ``(k - 1, N - k)`` degrees of freedom, ``s^2`` the pooled
  within-node variance of ``d``. With two nodes ``F = t^2`` of the contrast below.
- Per node: node ``n`` vs the rest of the fleet (every other node's blocks together), the
  difference of mean log ratios ``dbar_n - dbar_rest`` with the t-interval from the same pooled
  ``s`` (``se = s * sqrt(1/n_n + 1/n_rest)``, ``N - k`` df). With two nodes that is the one
  contrast, first node vs second, reported once; with three or more, one per node and the
  p-values Holm-adjusted across the nodes.
- On the ratio scale the difference is a ratio of ratios: ``exp(dbar_n - dbar_rest)`` is this
  node's T/B divided by the rest's; 1 means the same effect. ``(ratio of ratios - 1) * 100`` is
  how many percent slower (> 0) or faster (< 0) the arm is, relative to its baseline, on this
  node than on the rest.

Never a confident wrong number: fewer than two nodes with pairs, or no within-node degrees of
freedom (one block per node), give no interval and a note says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import scipy.stats as sps

from abtest.errors import UserError
from abtest.stats.frame import ARM, BLOCK, SIZE, arm_order, check_rounds
from abtest.stats.intervals import RELATIVE_TOLERANCE, check_confidence, holm

NODE = "node"

TWO_NODES = "two nodes: first vs second, pooled within-node variance"
EACH_VS_REST = "each node vs the rest of the fleet, pooled within-node variance, Holm over nodes"


@dataclass(frozen=True)
class NodeContrast:
    """One node's effect vs the rest of the fleet's (with two nodes: vs the other node)."""

    node: str
    rest: tuple[str, ...]
    n_pairs: int  # this node's complete blocks
    n_pairs_rest: int
    log_ratio: float  # this node's mean per-block log(T/B)
    log_ratio_rest: float
    difference: float  # log_ratio - log_ratio_rest
    difference_ci: tuple[float, float] | None
    ratio_of_ratios: float  # exp(difference): this node's T/B over the rest's
    ratio_of_ratios_ci: tuple[float, float] | None
    p_value: float | None
    p_adjusted: float | None

    @property
    def pct_difference(self) -> float:
        """How much slower (> 0) relative to baseline the arm is here than on the rest, in %."""
        return (self.ratio_of_ratios - 1.0) * 100.0

    @property
    def pct_difference_ci(self) -> tuple[float, float] | None:
        ci = self.ratio_of_ratios_ci
        return None if ci is None else ((ci[0] - 1.0) * 100.0, (ci[1] - 1.0) * 100.0)


@dataclass(frozen=True)
class NodeInteraction:
    """Whether ``arm``'s effect vs ``baseline`` at ``size`` differs between nodes."""

    arm: str
    baseline: str
    size: int
    metric: str
    confidence: float
    nodes: tuple[str, ...]  # nodes with at least one complete block, in first-seen order
    n_pairs: tuple[int, ...]  # per node, same order
    df: int  # within-node degrees of freedom of the pooled variance (N - k)
    sd_within: float | None  # pooled within-node SD of the per-block log ratios
    f_stat: float | None
    p_value: float | None  # heterogeneity F-test: "every node has the same effect"
    method: str
    contrasts: tuple[NodeContrast, ...]
    note: str


def node_interaction(
    rounds: pd.DataFrame,
    *,
    baseline: str,
    treatment: str,
    size: int,
    metric: str,
    confidence: float = 0.95,
) -> NodeInteraction:
    """The node x arm interaction of ``treatment`` vs ``baseline`` at ``size``.

    ``rounds`` needs columns ``arm``, ``size``, ``node``, ``block`` (the block within its node)
    and ``metric``.
    """
    check_confidence(confidence)
    check_rounds(rounds, metric)
    missing = [c for c in (NODE, BLOCK) if c not in rounds.columns]
    if missing:
        raise UserError(
            f"rounds have no column {', '.join(missing)}",
            "node x arm interaction",
            "give every round its node and its block within that node",
        )
    if baseline == treatment:
        raise UserError(
            f"the same arm {baseline!r} on both sides of a comparison",
            f"{metric} at size {size}",
            "compare two different arms",
        )
    per_node = _log_ratios_by_node(rounds, baseline, treatment, size, metric)
    nodes = tuple(per_node)
    counts = tuple(len(per_node[n]) for n in nodes)
    k, total = len(nodes), sum(counts)
    df = total - k

    def empty(note: str, sd: float | None = None) -> NodeInteraction:
        return NodeInteraction(
            treatment, baseline, int(size), metric, confidence, nodes, counts, max(df, 0),
            sd, None, None, _method(k), (), note,
        )  # fmt: skip

    if k < 2:
        return empty(f"{k} node{'s' if k != 1 else ''} with complete blocks: nothing to compare")
    if df < 1:
        return empty("one block per node: no within-node variation to judge a difference by")
    means = np.array([per_node[n].mean() for n in nodes])
    ss_within = float(sum(((per_node[n] - per_node[n].mean()) ** 2).sum() for n in nodes))
    s2 = ss_within / df
    everything = np.concatenate([per_node[n] for n in nodes])
    if s2 <= 0.0 or np.sqrt(s2) <= RELATIVE_TOLERANCE * float(np.abs(everything).max() or 1.0):
        return empty("no variation within nodes (no interval)", 0.0)
    grand = float(everything.mean())
    ss_between = float((np.array(counts) * (means - grand) ** 2).sum())
    f_stat = (ss_between / (k - 1)) / s2
    p_het = float(sps.f.sf(f_stat, k - 1, df))
    crit = float(sps.t.ppf(0.5 + confidence / 2.0, df))
    which = nodes[:1] if k == 2 else nodes
    contrasts = []
    for node in which:
        rest = tuple(n for n in nodes if n != node)
        other = np.concatenate([per_node[n] for n in rest])
        mine = per_node[node]
        diff = float(mine.mean() - other.mean())
        se = float(np.sqrt(s2 * (1.0 / mine.size + 1.0 / other.size)))
        lo, hi = diff - crit * se, diff + crit * se
        p = float(2.0 * sps.t.sf(abs(diff / se), df))
        contrasts.append(
            NodeContrast(
                node=node,
                rest=rest,
                n_pairs=int(mine.size),
                n_pairs_rest=int(other.size),
                log_ratio=float(mine.mean()),
                log_ratio_rest=float(other.mean()),
                difference=diff,
                difference_ci=(lo, hi),
                ratio_of_ratios=float(np.exp(diff)),
                ratio_of_ratios_ci=(float(np.exp(lo)), float(np.exp(hi))),
                p_value=p,
                p_adjusted=p,
            )
        )
    if k > 2:
        adjusted = holm([c.p_value for c in contrasts])
        contrasts = [replace(c, p_adjusted=p) for c, p in zip(contrasts, adjusted, strict=True)]
    return NodeInteraction(
        treatment, baseline, int(size), metric, confidence, nodes, counts, df,
        float(np.sqrt(s2)), float(f_stat), p_het, _method(k), tuple(contrasts), "",
    )  # fmt: skip


def node_interactions(
    rounds: pd.DataFrame, *, baseline: str, metric: str, confidence: float = 0.95
) -> list[NodeInteraction]:
    """Every non-baseline arm at every size where the baseline has rounds."""
    check_rounds(rounds, metric)
    out = []
    base_sizes = sorted(int(s) for s in pd.unique(rounds.loc[rounds[ARM] == baseline, SIZE]))
    for size in base_sizes:
        for arm in arm_order(rounds):
            if arm == baseline or not ((rounds[ARM] == arm) & (rounds[SIZE] == size)).any():
                continue
            out.append(
                node_interaction(
                    rounds,
                    baseline=baseline,
                    treatment=arm,
                    size=size,
                    metric=metric,
                    confidence=confidence,
                )
            )
    return out


def _log_ratios_by_node(
    rounds: pd.DataFrame, baseline: str, treatment: str, size: int, metric: str
) -> dict[str, np.ndarray]:
    """Per node, the per-block log ratios over the blocks where both arms were measured."""
    rows = rounds[(rounds[SIZE] == size) & rounds[ARM].isin([baseline, treatment])]
    rows = rows[rows[BLOCK].notna() & rows[NODE].notna()]
    logs = pd.DataFrame(
        {
            NODE: rows[NODE].astype(str).to_numpy(),
            BLOCK: rows[BLOCK].astype(str).to_numpy(),
            ARM: rows[ARM].astype(str).to_numpy(),
            "log": np.log(rows[metric].to_numpy(dtype=np.float64)),
        }
    )
    cell = logs.groupby([NODE, BLOCK, ARM], sort=False)["log"].mean().unstack(ARM)
    out: dict[str, np.ndarray] = {}
    if baseline not in cell.columns or treatment not in cell.columns:
        return out
    complete = cell.dropna(subset=[baseline, treatment])
    order = [str(n) for n in pd.unique(logs[NODE])]
    for node in order:
        if node in complete.index.get_level_values(0):
            part = complete.loc[node]
            out[node] = (part[treatment] - part[baseline]).to_numpy(dtype=np.float64)
    return out


def _method(k: int) -> str:
    return TWO_NODES if k == 2 else EACH_VS_REST
