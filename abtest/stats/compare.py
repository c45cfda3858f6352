"""Treatment vs baseline at one size: savings, percent reduction, intervals, p-values.

Why this method
---------------
- Round times are skewed (a slow round is much slower, a fast one only a bit faster) and
  effects are multiplicative (a gate that saves 20 % saves more seconds on a 150-pod batch than
  on a 50-pod one). So the *ratio* T/B is estimated on the log scale, where the noise is close
  to symmetric and an effect is a shift: ``log T - log B``. Its t-interval is exponentiated to a
  ratio interval and reported as percent reduction ``(1 - ratio) * 100``. The point estimate
  on the same scale is the geometric-mean ratio, so ``pct_reduction`` is
  ``(GM_B - GM_T) / GM_B * 100`` and the interval covers exactly what it claims.
  The arithmetic ``(mean B - mean T) / mean B * 100`` is reported beside it
  (``pct_reduction_arithmetic``) without an interval, from the same rounds the interval used
  (complete blocks when paired); the all-rounds one is ``pct_reduction_arithmetic_all_rounds``.
- Savings in seconds ``B - T`` are estimated on the raw scale (a difference of means), because
  that is what seconds mean; their interval is a t-interval on the same pairing.
- Small n (5 blocks) is the normal case: Student-t rather than normal quantiles, and a
  bootstrap is avoided because with 5 blocks it has only a handful of distinct resamples and
  undercovers. The calibration tests show the t-intervals cover 93-97 % at 5, 10, 20 blocks.
- Pairing removes drift: in randomized complete blocks every arm is measured once per block,
  so the per-block log ratio cancels whatever made that block slow (node warm-up, neighbour
  load). When blocks are present and pair up, the analysis is a paired t on per-block log
  ratios (and on per-block differences for seconds); otherwise Welch's unequal-variance t on
  the logs (ratio) and on the raw times (seconds).
- When fewer than 2 pairs (or fewer than 2 rounds on a side) exist, no interval and no p-value
  are given and ``note`` says so: one round cannot tell noise from effect.
- The p-value tests "no change" on the log scale, so it agrees with the percent interval
  (p < 1 - confidence exactly when ``pct_ci`` excludes 0). Holm adjusts the p-values across the
  arms of one (size, metric) table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from abtest.stats.contrast import ContrastEstimate, Scale, estimate_contrast
from abtest.stats.frame import (
    SIZE,
    Pair,
    check_baseline,
    check_rounds,
    finite,
    rows_for,
    sizes_of,
    vs_baseline,
)
from abtest.stats.intervals import (
    check_confidence,
    holm,
    pct_reduction_from_log_ratio,
    ratio_and_pct_ci,
)


@dataclass(frozen=True)
class Comparison:
    """One treatment arm vs the baseline arm at one size, for one metric.

    ``savings_s = B - T`` (seconds, > 0 means the treatment is faster) and
    ``pct_reduction = (1 - GM_T / GM_B) * 100`` (geometric means; matches ``pct_ci``).
    ``savings_s`` and ``pct_reduction`` are the estimates the intervals are built around: in a
    paired analysis, over the complete blocks. ``baseline_mean_matched`` and
    ``treatment_mean_matched`` are the means the saving is made of (complete blocks when
    paired, all rounds otherwise), so ``savings_s == baseline_mean_matched -
    treatment_mean_matched`` always, and ``pct_reduction_arithmetic`` is made of them too;
    ``baseline_mean``/``treatment_mean``, the medians and
    ``pct_reduction_arithmetic_all_rounds`` are over all rounds of each arm and differ from
    those on unbalanced data (one rule: a figure beside an interval comes from its rounds).
    Intervals and p-values are None when they cannot be computed: ``savings_note`` and
    ``pct_note`` say why for each scale ("" when it has an interval), ``note`` says it all.
    """

    arm: str
    baseline: str
    size: int
    metric: str
    confidence: float
    n_baseline: int
    n_treatment: int
    n_pairs: int  # complete blocks in a paired analysis, 0 when unpaired
    baseline_mean: float
    treatment_mean: float
    baseline_median: float
    treatment_median: float
    savings_s: float
    savings_ci: tuple[float, float] | None
    ratio: float  # geometric-mean ratio T / B
    ratio_ci: tuple[float, float] | None
    pct_reduction: float
    pct_ci: tuple[float, float] | None
    pct_reduction_arithmetic: float
    p_value: float | None
    p_adjusted: float | None
    method: str  # "paired" (by block), "welch" or "none" (no interval)
    note: str
    savings_note: str = ""  # why savings_ci is None ("" when it is not)
    pct_note: str = ""  # why pct_ci / ratio_ci / p_value are None ("" when they are not)
    baseline_mean_matched: float = float("nan")  # the means savings_s is computed from
    treatment_mean_matched: float = float("nan")
    pct_reduction_arithmetic_all_rounds: float = float("nan")  # from baseline/treatment_mean

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: intervals as [low, high], a number that is not finite as None."""
        return {f.name: finite(getattr(self, f.name)) for f in dataclasses.fields(self)}


def compare(
    rounds: pd.DataFrame, *, baseline: str, metric: str, confidence: float = 0.95
) -> list[Comparison]:
    """Every non-baseline arm vs ``baseline``, one table per size, Holm within each table.

    Sizes without baseline rounds are skipped (nothing to compare against); see
    ``uncomparable`` for listing them. Results are ordered by size, then arm order of first
    appearance in ``rounds``.
    """
    check_confidence(confidence)
    check_rounds(rounds, metric)
    check_baseline(rounds, baseline, "rounds")
    results: list[Comparison] = []
    for size, arms in vs_baseline(rounds, baseline):
        table = [
            compare_pair(rounds, Pair(baseline, arm, size, metric, confidence)) for arm in arms
        ]
        adjusted = holm([c.p_value for c in table])
        results.extend(
            dataclasses.replace(c, p_adjusted=p) for c, p in zip(table, adjusted, strict=True)
        )
    return results


def uncomparable(rounds: pd.DataFrame, *, baseline: str) -> list[tuple[str, int]]:
    """(arm, size) pairs that have rounds but no baseline rounds at that size."""
    with_baseline = set(sizes_of(rounds, baseline))
    pairs = rounds.loc[rounds["arm"] != baseline, ["arm", SIZE]].drop_duplicates()
    return [
        (str(arm), int(size))
        for arm, size in pairs.itertuples(index=False, name=None)
        if int(size) not in with_baseline
    ]


def compare_pair(
    rounds: pd.DataFrame, pair: Pair, *, history: pd.DataFrame | None = None
) -> Comparison:
    """``pair.treatment`` vs ``pair.baseline`` at one size (a table of one: ``p_adjusted ==
    p_value``); ``history``, the node's earlier rounds, informs the metric's resolution only."""
    comparison, _ = compare_pair_with_saving(rounds, pair, history=history)
    return comparison


def compare_pair_with_saving(
    rounds: pd.DataFrame, pair: Pair, *, history: pd.DataFrame | None = None
) -> tuple[Comparison, ContrastEstimate]:
    """``compare_pair``, and the contrast in seconds (``B - T``) its ``savings_s`` and
    ``savings_ci`` are, for a caller that also wants that scale's p-value (the comparison's
    ``p_value`` tests the ratio on the log scale)."""
    baseline, treatment, size, metric = pair.baseline, pair.treatment, pair.size, pair.metric
    check_confidence(pair.confidence)
    check_rounds(rounds, metric)
    pair.check_two_arms()
    base = rows_for(rounds, baseline, size)[metric].to_numpy(dtype=np.float64)
    treat = rows_for(rounds, treatment, size)[metric].to_numpy(dtype=np.float64)

    # Same rows and same pairing for both scales, so the method is the same for both.
    def contrast(first: str, second: str, scale: Scale) -> ContrastEstimate:
        return estimate_contrast(
            rounds,
            coefficients={first: 1.0, second: -1.0},
            size=size,
            metric=metric,
            confidence=pair.confidence,
            scale=scale,
            history=history,
        )

    savings = contrast(baseline, treatment, "raw")
    log_ratio = contrast(treatment, baseline, "log")
    # The saving is a difference of these means exactly (complete blocks when paired).
    matched = dict(savings.arm_means)
    ratio_ci, pct_ci = ratio_and_pct_ci(log_ratio.ci)
    base_mean = float(base.mean())
    comparison = Comparison(
        arm=treatment,
        baseline=baseline,
        size=int(size),
        metric=metric,
        confidence=pair.confidence,
        n_baseline=int(base.size),
        n_treatment=int(treat.size),
        n_pairs=log_ratio.n_blocks,
        baseline_mean=base_mean,
        treatment_mean=float(treat.mean()),
        baseline_median=float(np.median(base)),
        treatment_median=float(np.median(treat)),
        savings_s=savings.estimate,
        savings_ci=savings.ci,
        ratio=float(np.exp(log_ratio.estimate)),
        ratio_ci=ratio_ci,
        pct_reduction=pct_reduction_from_log_ratio(log_ratio.estimate),
        pct_ci=pct_ci,
        pct_reduction_arithmetic=(
            (matched[baseline] - matched[treatment]) / matched[baseline] * 100.0
        ),
        p_value=log_ratio.p_value,
        p_adjusted=log_ratio.p_value,
        method=log_ratio.method,
        note=_combined_note(savings.note, log_ratio.note),
        savings_note="" if savings.ci is not None else savings.note,
        pct_note="" if log_ratio.ci is not None else log_ratio.note,
        baseline_mean_matched=matched[baseline],
        treatment_mean_matched=matched[treatment],
        pct_reduction_arithmetic_all_rounds=(base_mean - float(treat.mean())) / base_mean * 100.0,
    )
    return comparison, savings


def _combined_note(savings_note: str, log_note: str) -> str:
    """One note for both scales: what they share once, what differs named by its scale.

    The scales share their rounds and pairing, so they differ only in whether their own
    differences vary (a constant difference in seconds is a varying ratio, and vice versa).
    """
    saving_parts = [p for p in savings_note.split("; ") if p]
    log_parts = [p for p in log_note.split("; ") if p]
    shared = [p for p in log_parts if p in saving_parts]
    only_pct = [f"percent reduction: {p}" for p in log_parts if p not in saving_parts]
    only_saving = [f"saving: {p}" for p in saving_parts if p not in log_parts]
    return "; ".join([*shared, *only_saving, *only_pct])
