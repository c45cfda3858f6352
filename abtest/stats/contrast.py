"""A linear contrast of arm means at one size, paired by block when the blocks allow it.

Everything the stats layer estimates is such a contrast: savings ``B - T`` is {B: +1, T: -1} on
the seconds scale; the log ratio ``log T - log B`` is {T: +1, B: -1} on the log scale; the
non-additivity of k factors and every exact Shapley value are contrasts over more arms.

Pairing: when every round has a block label, rounds are averaged per (block, arm) and the
contrast is computed per block over the blocks in which every arm of the contrast appears
("complete blocks"); with >= 2 complete blocks, a one-sample t-interval on those per-block
values is used. Block effects (drift, a slow node hour) cancel inside each block's contrast,
which is why pairing gives shorter, still honest intervals. Otherwise the arms are treated as
independent samples and the Welch-Satterthwaite interval for the contrast is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from abtest.errors import NO_VARIATION, TOO_SMALL, UserError
from abtest.stats.frame import ARM, BLOCK, SIZE, has_blocks
from abtest.stats.intervals import TIntervals, no_variation, welch_contrast
from abtest.stats.resolution import (
    MIN_RELATIVE_STEP,
    coarse_note,
    floored_note,
    grid_step,
    paired_coarse,
)

Scale = Literal["raw", "log"]
Method = Literal["paired", "welch", "none"]


@dataclass(frozen=True)
class ContrastEstimate:
    """A point estimate, its interval (None when n is too small) and how it was obtained.

    ``arm_means`` are the per-arm means (on the contrast's scale) the estimate is made of:
    over the complete blocks in a paired analysis (per-block means first), over all rounds in
    a Welch one, so ``estimate == sum(c_arm * mean_arm)`` exactly.
    """

    estimate: float
    ci: tuple[float, float] | None
    p_value: float | None
    method: Method
    n_blocks: int  # complete blocks used by the paired analysis; 0 otherwise
    note: str
    arm_means: tuple[tuple[str, float], ...] = ()


def estimate_contrast(
    rounds: pd.DataFrame,
    *,
    coefficients: Mapping[str, float],
    size: int,
    metric: str,
    confidence: float,
    scale: Scale,
    history: pd.DataFrame | None = None,
) -> ContrastEstimate:
    """Estimate ``sum_arm c_arm * E[metric | arm, size]`` (on ``scale``) with a t-interval.

    Every arm with a non-zero coefficient must have at least one round at ``size``. The
    metric's resolution is found over ``rounds`` whole and ``history`` (the node's earlier
    rounds, any frame with the ``metric`` column), see ``metric_step``.
    """
    coefs = {arm: float(c) for arm, c in coefficients.items() if c != 0.0}
    if not coefs:
        raise ValueError("a contrast needs at least one non-zero coefficient")
    selected = rounds[(rounds[SIZE] == size) & rounds[ARM].isin(list(coefs))]
    values = selected[metric].to_numpy(dtype=np.float64)
    if scale == "log":
        values = np.log(values)
    data = pd.DataFrame({ARM: selected[ARM].to_numpy(), "value": values})
    absent = [arm for arm in coefs if arm not in set(data[ARM])]
    if absent:
        raise UserError(
            f"no rounds for arm {', '.join(absent)} at size {size}",
            f"{metric} at size {size}",
            "measure that arm at this size or leave it out",
        )
    # The size of the rounding error the contrast's arithmetic can make. On the log scale a
    # time's own representation error is ~1e-16 absolute, hence the floor of 1.
    floor = 1.0 if scale == "log" else 0.0
    magnitude = max(floor, float(np.abs(values).max())) * sum(abs(c) for c in coefs.values())
    fallback_note = ""
    if has_blocks(selected):
        data[BLOCK] = selected[BLOCK].to_numpy()
        per_block = data.groupby([BLOCK, ARM], sort=True)["value"].mean().unstack(ARM)
        complete = per_block[list(coefs)].dropna()
        if len(complete) >= 2:
            step = metric_step(rounds, selected, metric, history)
            return _paired(data, complete, coefs, confidence, magnitude, (scale, step))
        fallback_note = f"blocks do not pair up ({len(complete)} complete); unpaired Welch"
    return _welch(data, coefs, confidence, fallback_note, magnitude)


def metric_step(
    rounds: pd.DataFrame, selected: pd.DataFrame, metric: str, history: pd.DataFrame | None
) -> float:
    """The resolution of ``metric`` for a comparison of the ``selected`` rounds: the grid the
    whole run shows (every arm and size in ``rounds``, and ``history``'s rounds), unless it is
    under ``MIN_RELATIVE_STEP`` of this comparison's values; else the comparison's own.

    Once per metric, not per comparison (issue 46): a comparison whose rounds all end on one
    tick shows no grid of its own, where the run's other arms and sizes, or the node's history,
    do; the run's grid then floors it or refuses it instead of a plain t on the jitter."""
    own = selected[metric].to_numpy(dtype=np.float64)
    frames = [rounds] if history is None or metric not in history else [rounds, history]
    pooled = np.concatenate([f[metric].to_numpy(dtype=np.float64) for f in frames])
    pooled = pooled[np.isfinite(pooled)]
    run = float(grid_step(pooled)) if pooled.size > 1 else 0.0
    if run > 0 and run >= MIN_RELATIVE_STEP * float(np.median(np.abs(own))):
        return run
    return float(grid_step(own))


def _paired(
    data: pd.DataFrame,
    complete: pd.DataFrame,
    coefs: dict[str, float],
    confidence: float,
    magnitude: float,
    resolution: tuple[Scale, float],
) -> ContrastEstimate:
    """The paired t-interval over complete blocks; on coarse data (values on a grid, see
    ``abtest.stats.resolution``) its SD is floored at the rounding's, or it is refused."""
    scale, step = resolution
    coef_vector = np.array([coefs[arm] for arm in complete.columns], dtype=np.float64)
    cells = complete.to_numpy(dtype=np.float64)
    raw = np.exp(cells) if scale == "log" else cells
    notes = []
    dropped = int((~data[BLOCK].isin(complete.index)).sum())
    if dropped:
        notes.append(f"{dropped} round(s) in incomplete blocks left out")
    if data.groupby([BLOCK, ARM]).size().max() > 1:
        notes.append("repeated rounds averaged within block")
    means = tuple((str(arm), float(complete[arm].mean())) for arm in complete.columns)
    coarse = paired_coarse(raw, coef_vector, step, confidence, log=scale == "log")
    if bool(coarse.coarse):
        spread = float(np.sqrt(raw.var(axis=0, ddof=1).mean()))
        notes.append(coarse_note(step, spread))
        estimate = float(coarse.intervals.estimate)
        return ContrastEstimate(
            estimate, None, None, "paired", len(complete), "; ".join(notes), means
        )
    if bool(coarse.floored):
        notes.append(floored_note(step))
    return _from_intervals(coarse.intervals, "paired", len(complete), notes, magnitude, means)


def _welch(
    data: pd.DataFrame,
    coefs: dict[str, float],
    confidence: float,
    fallback_note: str,
    magnitude: float,
) -> ContrastEstimate:
    groups = data.groupby(ARM)["value"]
    arms = list(coefs)
    means = groups.mean().reindex(arms).to_numpy(dtype=np.float64)
    counts = groups.size().reindex(arms).to_numpy(dtype=np.float64)
    coef_vector = np.array([coefs[arm] for arm in arms], dtype=np.float64)
    arm_means = tuple((arm, float(m)) for arm, m in zip(arms, means, strict=True))
    notes = [fallback_note] if fallback_note else []
    if counts.min() < 2:
        estimate = float(coef_vector @ means)
        single = [arm for arm, n in zip(arms, counts, strict=True) if n < 2]
        why = f"{TOO_SMALL} (fewer than 2 rounds of {', '.join(single)})"
        return ContrastEstimate(
            estimate, None, None, "none", 0, "; ".join([*notes, why]), arm_means
        )
    variances = groups.var(ddof=1).reindex(arms).to_numpy(dtype=np.float64)
    result = welch_contrast(means, variances, counts, coef_vector, confidence)
    return _from_intervals(result, "welch", 0, notes, magnitude, arm_means)


def _from_intervals(
    result: TIntervals,
    method: Method,
    n_blocks: int,
    notes: list[str],
    magnitude: float,
    arm_means: tuple[tuple[str, float], ...],
) -> ContrastEstimate:
    estimate = float(result.estimate)
    if bool(no_variation(result.se, magnitude)):
        notes.append(NO_VARIATION)
        return ContrastEstimate(estimate, None, None, method, n_blocks, "; ".join(notes), arm_means)
    return ContrastEstimate(
        estimate=estimate,
        ci=(float(result.lo), float(result.hi)),
        p_value=float(result.p_value),
        method=method,
        n_blocks=n_blocks,
        note="; ".join(notes),
        arm_means=arm_means,
    )
