"""Does an arm's effect differ between nodes? The node x arm interaction of a fleet sweep.

A fleet sweep runs the same randomized block schedule on every node, so each node has its own
blocks and the effect of an arm (vs the baseline, at one size) is measured per block within a
node as the per-block log ratio ``d = log T - log B`` (rounds averaged per block and arm on the
log scale first, as ``stats.contrast`` pairs them). Pairing stays within a node: a block on one
node has nothing to do with the same-numbered block on another.

Method (the node x arm interaction of the model ``log y = block(node) + arm + node:arm + e``)
-----------------------------------------------------------------------------------------
With two arms, that interaction is a one-way analysis of the per-block log ratios by node:
``d[n, b] = mu + a[n] + e[n, b]``, ``e[n, b] ~ N(0, s_n^2)``, each node with **its own** error
variance. Real fleets mix hardware and neighbours, so one node is often much noisier than the
others; a pooled variance then lends the noisy node the quiet ones' precision (the audit of
issue 26 measured 73 % coverage for that node and 13.6-26.8 % false "nodes differ").

- Per node: node ``n`` vs the rest of the fleet (every other node's blocks together), the
  difference of mean log ratios ``dbar_n - dbar_rest``. ``dbar_rest`` is the mean over the
  rest's blocks, i.e. the linear contrast ``dbar_n - sum_m (n_m / N_rest) dbar_m`` of
  independent node means, whose variance is ``s_n^2 / n_n + sum_m (n_m / N_rest)^2 s_m^2 /
  n_m``: a Welch-Satterthwaite t-interval. With two nodes that is Welch's two-sample interval,
  first node vs second, reported once; with three or more, one per node and the p-values
  Holm-adjusted across the nodes.
- Heterogeneity ("every node has the same effect"): Welch's (1951) heteroscedastic one-way
  test, weights ``w_n = n_n / s_n^2``. With two nodes its F is the square of the contrast's t
  and its p-value the contrast's.
- Small-sample correction of the degrees of freedom: a node's variance from a handful of
  blocks is itself very uncertain, and the Satterthwaite df computed from it is too large
  exactly when the noisy node's variance happens to come out small, which makes plain Welch
  liberal (6.2 % false "differs" with a 5x noisier node of 3 blocks against a quiet node of
  8). Every df formula here therefore counts a node of ``n`` blocks as ``n - 1.75`` degrees of
  freedom instead of ``n - 1`` (at least ``NODE_DF_FLOOR`` = 0.25, i.e. a 2-block node), and
  the total df is at least 1. The constant was chosen by simulation over a grid of fleets
  (2-4 nodes, 2-10 blocks, equal and 5x noise); the calibration tests
  (``tests/unit/stats/test_stats_fleet_calibration.py``, figures in ``docs/statistics.md``)
  show 93-97 %
  coverage and <= 5 % false "differs" with one node 5x noisier and with 3 vs 8 blocks. Where
  it is weaker: a node with only 2 blocks makes the interval conservative (99 % coverage at 2
  vs 2 blocks), which is the price of not assuming equal noise, and a 2-block node against 5-8
  blocks on the other is slightly liberal (5.2-5.6 % false "differs").
- On the ratio scale the difference is a ratio of ratios: ``exp(dbar_n - dbar_rest)`` is this
  node's T/B divided by the rest's; 1 means the same effect. ``(ratio of ratios - 1) * 100`` is
  how many percent slower (> 0) or faster (< 0) the arm is, relative to its baseline, on this
  node than on the rest.

Never a confident wrong number: a node with a single complete block has no variance of its own
and is left out (the note names it); fewer than two nodes with two or more blocks, or a node
without any variation within its blocks, give no interval and a note says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.stats as sps

from abtest.errors import UserError
from abtest.stats.frame import ARM, BLOCK, SIZE, Pair, check_rounds, vs_baseline
from abtest.stats.intervals import RELATIVE_TOLERANCE, check_confidence, holm

NODE = "node"

TWO_NODES = "two nodes: first vs second, Welch (each node its own variance)"
EACH_VS_REST = "each node vs the rest of the fleet, Welch (each node its own variance), Holm"

# Degrees of freedom a node of n blocks counts for in the Satterthwaite formulas: n - 1.75, not
# n - 1 (see the module docstring: plain Welch is liberal when the noisy node has few blocks).
DF_CORRECTION = 1.75
NODE_DF_FLOOR = 0.25

FloatArray = npt.NDArray[np.float64]


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
    df: float = float("nan")  # Satterthwaite df of this contrast (corrected, see module doc)

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
    nodes: tuple[str, ...]  # nodes analysed (>= 2 complete blocks), in first-seen order
    n_pairs: tuple[int, ...]  # per node, same order
    df: float  # denominator df of Welch's heterogeneity test (corrected, see module doc)
    sd_by_node: tuple[float, ...]  # per node, the SD of its per-block log ratios
    f_stat: float | None
    p_value: float | None  # heterogeneity test: "every node has the same effect"
    method: str
    contrasts: tuple[NodeContrast, ...]
    note: str
    left_out: tuple[str, ...] = ()  # nodes with a single complete block (no own variance)


@dataclass(frozen=True)
class WelchNodes:
    """Welch's heterogeneity test and the each-vs-rest contrasts, elementwise.

    Arrays have the leading shape of the inputs (one simulated fleet per row in the
    calibration tests; a 0-d array for one real fleet); the ``contrast_*`` arrays carry one
    more, last axis: one contrast per node (node ``j`` vs the others).
    """

    f_stat: FloatArray
    df2: FloatArray
    p_value: FloatArray
    estimate: FloatArray
    lo: FloatArray
    hi: FloatArray
    contrast_p: FloatArray
    contrast_df: FloatArray


def node_df(counts: npt.ArrayLike) -> FloatArray:
    """The degrees of freedom a node's variance counts for (``n - 1.75``, floored)."""
    n = np.asarray(counts, dtype=np.float64)
    return np.maximum(n - DF_CORRECTION, NODE_DF_FLOOR)


def welch_nodes(
    means: npt.ArrayLike, variances: npt.ArrayLike, counts: npt.ArrayLike, confidence: float
) -> WelchNodes:
    """The interaction statistics from per-node means, sample variances and block counts.

    Nodes are on the last axis; every variance must be > 0 and every count >= 2. Vectorised
    so that the calibration tests run thousands of fleets through this very code.
    """
    m = np.asarray(means, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    n = np.broadcast_to(np.asarray(counts, dtype=np.float64), m.shape)
    k = m.shape[-1]
    nu = node_df(n)
    # Welch (1951): weighted between-node dispersion over a correction for the weights' noise.
    w = n / v
    total = w.sum(axis=-1, keepdims=True)
    centre = (w * m).sum(axis=-1, keepdims=True) / total
    between = (w * (m - centre) ** 2).sum(axis=-1) / (k - 1)
    lam = ((1.0 - w / total) ** 2 / nu).sum(axis=-1)
    f_stat = between / (1.0 + 2.0 * (k - 2) / (k**2 - 1.0) * lam)
    df2 = np.maximum((k**2 - 1.0) / (3.0 * lam), 1.0)
    p_het = np.asarray(sps.f.sf(f_stat, k - 1, df2), dtype=np.float64)
    # Node j vs the rest: coefficient 1 on j, -n_m / N_rest on every other node m.
    eye = np.eye(k, dtype=np.float64)
    rest_n = (n[..., None, :] * (1.0 - eye)).sum(axis=-1, keepdims=True)  # (..., j, 1)
    coef = eye - (1.0 - eye) * n[..., None, :] / rest_n  # (..., j, m)
    est = (coef * m[..., None, :]).sum(axis=-1)
    parts = coef**2 * (v / n)[..., None, :]
    se2 = parts.sum(axis=-1)
    df = np.maximum(se2**2 / (parts**2 / nu[..., None, :]).sum(axis=-1), 1.0)
    se = np.sqrt(se2)
    crit = np.asarray(sps.t.ppf(0.5 + confidence / 2.0, df), dtype=np.float64)
    p_c = np.asarray(2.0 * sps.t.sf(np.abs(est / se), df), dtype=np.float64)
    return WelchNodes(f_stat, df2, p_het, est, est - crit * se, est + crit * se, p_c, df)


def node_interaction(rounds: pd.DataFrame, pair: Pair) -> NodeInteraction:
    """The node x arm interaction of ``pair.treatment`` vs ``pair.baseline`` at its size.

    ``rounds`` needs columns ``arm``, ``size``, ``node``, ``block`` (the block within its node)
    and ``metric``.
    """
    baseline, treatment, size, metric = pair.baseline, pair.treatment, pair.size, pair.metric
    confidence = pair.confidence
    check_confidence(confidence)
    check_rounds(rounds, metric)
    missing = [c for c in (NODE, BLOCK) if c not in rounds.columns]
    if missing:
        raise UserError(
            f"rounds have no column {', '.join(missing)}",
            "node x arm interaction",
            "give every round its node and its block within that node",
        )
    pair.check_two_arms()
    every = _log_ratios_by_node(rounds, baseline, treatment, size, metric)
    left_out = tuple(n for n, d in every.items() if d.size < 2)
    per_node = {n: d for n, d in every.items() if d.size >= 2}
    nodes = tuple(per_node)
    counts = tuple(len(per_node[n]) for n in nodes)
    sds = tuple(float(per_node[n].std(ddof=1)) for n in nodes)
    k = len(nodes)
    notes = (
        [f"left out (one complete block, no variance of its own): {', '.join(left_out)}"]
        if left_out
        else []
    )

    def empty(why: str) -> NodeInteraction:
        return NodeInteraction(
            treatment, baseline, int(size), metric, confidence, nodes, counts, float("nan"),
            sds, None, None, _method(k), (), "; ".join([*notes, why]), left_out,
        )  # fmt: skip

    if k < 2:
        if every and not per_node:
            return empty("one block per node: no within-node variation to judge a difference by")
        return empty(f"{k} node{'s' if k != 1 else ''} with 2+ complete blocks: nothing to compare")
    everything = np.concatenate([per_node[n] for n in nodes])
    limit = RELATIVE_TOLERANCE * float(np.abs(everything).max() or 1.0)
    flat = [n for n, sd in zip(nodes, sds, strict=True) if not sd > limit]
    if flat:
        # A node whose blocks agree to the last bit would get infinite weight: no interval.
        return empty(f"no variation within node {', '.join(flat)} (no interval)")
    stats = welch_nodes(
        [per_node[n].mean() for n in nodes],
        [sd**2 for sd in sds],
        counts,
        confidence,
    )
    which = range(1) if k == 2 else range(k)
    contrasts = []
    for j in which:
        node = nodes[j]
        rest = tuple(n for n in nodes if n != node)
        other = np.concatenate([per_node[n] for n in rest])
        lo, hi = float(stats.lo[j]), float(stats.hi[j])
        diff = float(stats.estimate[j])
        p = float(stats.contrast_p[j])
        contrasts.append(
            NodeContrast(
                node=node,
                rest=rest,
                n_pairs=counts[j],
                n_pairs_rest=int(other.size),
                log_ratio=float(per_node[node].mean()),
                log_ratio_rest=float(other.mean()),
                difference=diff,
                difference_ci=(lo, hi),
                ratio_of_ratios=float(np.exp(diff)),
                ratio_of_ratios_ci=(float(np.exp(lo)), float(np.exp(hi))),
                p_value=p,
                p_adjusted=p,
                df=float(stats.contrast_df[j]),
            )
        )
    if k > 2:
        adjusted = holm([c.p_value for c in contrasts])
        contrasts = [replace(c, p_adjusted=p) for c, p in zip(contrasts, adjusted, strict=True)]
    return NodeInteraction(
        treatment, baseline, int(size), metric, confidence, nodes, counts, float(stats.df2),
        sds, float(stats.f_stat), float(stats.p_value), _method(k), tuple(contrasts),
        "; ".join(notes), left_out,
    )  # fmt: skip


def node_interactions(
    rounds: pd.DataFrame, *, baseline: str, metric: str, confidence: float = 0.95
) -> list[NodeInteraction]:
    """Every non-baseline arm at every size where the baseline has rounds."""
    check_rounds(rounds, metric)
    out = []
    for size, arms in vs_baseline(rounds, baseline):
        for arm in arms:
            out.append(node_interaction(rounds, Pair(baseline, arm, size, metric, confidence)))
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
