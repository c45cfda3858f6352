"""Coarse data: a metric's resolution, and a paired interval that keeps its coverage on it.

Why. Times reported in whole seconds (kube-burner's latencies; batches whose end is the next
1 s tick of a relist) take a handful of values. With 3-6 blocks the per-block log ratios are
then often identical or nearly so, the sample SD collapses and the t-interval comes out falsely
narrow: reference 6, 5, 5 s against candidate 7, 6, 6 s gave [+7.3, +31.7] % at the gate's
level, so the gate FAILed a true +5 % (issue 37: the ``lab-regression`` playbook wrongly FAILed
3.6-4.1 %, the percent-reduction interval covered 91.7 % at 3 blocks).

What is done (``tests/unit/stats/test_coarse_calibration.py`` measures it):

- the resolution is the largest step of ``STEPS`` on whose grid every value lies (an offset
  allowed: ``v - min(v)`` are whole multiples), 0 when none or when it is finer than 1 % of the
  values (milliseconds on seconds are continuous for this purpose); failing that, a step of
  ``TICKS`` (1 s and up) nine in ten values lie within 5 % of, over two or more grid points
  and six values or more (whole seconds plus a watch's milliseconds: a batch ending on the 1 s
  relist);
- rounding to a step ``q`` adds to each value an error of variance ``q^2 / 12`` when the values
  spread over several steps (Sheppard; Widrow's quantization theorem). A block's contrast
  ``sum c_a x_ab`` therefore varies by at least ``sqrt(sum c_a^2 q^2 / 12)`` (``x_ab`` replaced
  by ``log x_ab`` on the log scale: ``c_a^2 q^2 / (12 x_ab^2)``), whatever the sample SD says:
  the SD the interval uses is floored there;
- where the values vary too little for rounding to act like noise (pooled within-arm SD below
  ``COARSE_SPREAD`` steps), the rounding is a bias no number of blocks removes: no interval,
  and the note says so (measure at a finer resolution or a larger size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from abtest.stats.intervals import FloatArray, TIntervals, _finish

#: grid steps tried, largest first, in the metric's unit (seconds)
STEPS = (10.0, 5.0, 2.0, 1.0, 0.5, 0.25, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)
#: below this many steps of within-arm SD the rounding is a bias, not noise (refused). Chosen on
#: an exploratory grid (3, 5.5, 10 s batches; 1-15 % noise; 3-20 blocks; whole seconds): at 0.3
#: the intervals given covered >= 94.6 % in every cell, at 0.4-0.5 they refused far more for
#: no gain. The test pins 5.5 s at 8 % noise (tests/unit/stats/test_coarse_calibration.py).
COARSE_SPREAD = 0.3
#: a step finer than this share of the values' median is no coarseness (ms on seconds: 0.02 %):
#: such data are treated as continuous, and a constant ratio there is "no variation"
MIN_RELATIVE_STEP = 0.01
#: steps also found with jitter (ticks: relists, kube-burner's whole seconds), how near (a
#: share of the step) and what share of the values must be to the grid; and at fewer values
#: no jitter is allowed
TICKS = (10.0, 5.0, 2.0, 1.0)
NEAR = 0.05
NEAR_SHARE = 0.9
NEAR_MIN_VALUES = 6
_ON_GRID = 1e-6  # relative tolerance: a value's binary representation, not a real offset


@dataclass(frozen=True)
class CoarseIntervals:
    """A paired t-interval on coarse data, elementwise; ``coarse`` marks refusals (lo/hi NaN)."""

    intervals: TIntervals
    step: FloatArray  # the resolution found, 0 where none
    floored: NDArray[np.bool_]  # the rounding's SD replaced a smaller sample SD
    coarse: NDArray[np.bool_]  # refused: the values vary too little against the step


def grid_step(values: ArrayLike) -> FloatArray:
    """The resolution of the values along the last axis: the largest step in ``STEPS`` whose
    grid (with any offset) holds every value; 0 where none does, where all values are equal or
    where the step is finer than ``MIN_RELATIVE_STEP`` of the values."""
    v = np.asarray(values, dtype=np.float64)
    shifted = v - v.min(axis=-1, keepdims=True)
    step = np.zeros(v.shape[:-1])
    varies = shifted.max(axis=-1) > 0
    scale = _ON_GRID * np.maximum(1.0, np.abs(v).max(axis=-1, keepdims=True))
    for q in reversed(STEPS):  # smallest first: a larger step that also fits overrides it
        k = shifted / q
        on = np.all(np.abs(k - np.round(k)) <= scale / q, axis=-1) & varies
        step = np.where(on, q, step)
    least = MIN_RELATIVE_STEP * np.median(np.abs(v), axis=-1)
    # values on no coarse exact grid (none, or milliseconds) may still lie near a tick; only
    # those are searched (it costs more than the exact search)
    off = step < least
    if off.any():
        step[off] = _near_grid(v[off])
    return np.asarray(np.where(step < least, 0.0, step), dtype=np.float64)


def _near_grid(v: FloatArray) -> FloatArray:
    """The largest of ``TICKS`` whose grid (the offset the values' circular mean) nine in ten
    values lie within ``NEAR`` of a step of, over at least two grid points; 0 where none.

    Batches that end on the kubelet's 1 s relist and start in step with it are whole seconds
    plus the milliseconds the watch takes: on no exact grid, yet as coarse as whole seconds
    (the plain t wrongly FAILed 5.3 % of ``lab-regression`` gates on them with 20 ms of jitter).
    Continuous values that near a grid by chance are rare: about 0.1 ** (0.9 n - 1). Nine in
    ten, not all: over a long history a jitter of 20 ms puts one value in 80 past 50 ms."""
    step = np.zeros(v.shape[:-1])
    for q in reversed(TICKS):  # smallest first, as above
        turns = np.exp(2j * np.pi * v / q)
        centre = np.angle(turns.mean(axis=-1, keepdims=True)) / (2 * np.pi)
        k = v / q - centre
        near = np.mean(np.abs(k - np.round(k)) <= NEAR, axis=-1) >= NEAR_SHARE
        points = np.round(k).max(axis=-1) > np.round(k).min(axis=-1)
        step = np.where(near & points & (v.shape[-1] >= NEAR_MIN_VALUES), q, step)
    return np.asarray(step, dtype=np.float64)


def paired_coarse(
    cells: ArrayLike, coefficients: ArrayLike, step: ArrayLike, confidence: float, log: bool
) -> CoarseIntervals:
    """The paired t-interval of ``sum_a c_a f(x_ab)`` over blocks b (``f`` = log or identity),
    with its SD floored at the rounding's and refused where the data are too coarse.

    ``cells`` are raw values shaped (..., blocks, arms); ``step`` (...,) the resolution, 0 for
    none (then this is the plain paired t-interval).
    """
    x = np.asarray(cells, dtype=np.float64)
    coef = np.asarray(coefficients, dtype=np.float64)
    q = np.asarray(step, dtype=np.float64)
    n = x.shape[-2]
    per_block = (np.log(x) if log else x) @ coef
    sd = per_block.std(axis=-1, ddof=1)
    weights = coef**2 / x**2 if log else np.broadcast_to(coef**2, x.shape)
    rounding_sd = np.sqrt(q**2 / 12.0 * weights.sum(axis=-1).mean(axis=-1))
    floored = rounding_sd > sd
    spread = np.sqrt(x.var(axis=-2, ddof=1).mean(axis=-1))
    coarse = (q > 0) & (spread < COARSE_SPREAD * q)
    used = np.maximum(sd, rounding_sd)
    estimate = np.asarray(per_block.mean(axis=-1), dtype=np.float64)
    df = np.full_like(estimate, float(n - 1))
    result = _finish(estimate, np.asarray(used / np.sqrt(n), dtype=np.float64), df, confidence)
    nan = np.where(coarse, np.nan, 0.0)
    result = TIntervals(
        result.estimate, result.lo + nan, result.hi + nan, result.p_value + nan, result.se, df
    )
    return CoarseIntervals(result, q, floored & ~coarse, coarse)


def coarse_note(step: float, spread: float) -> str:
    """Why a comparison on coarse data has no interval."""
    return (
        f"values on a {step:g} s grid vary by only {spread:.2g} s within an arm "
        f"(under {COARSE_SPREAD:g} of the step): rounding is a bias more blocks do not remove, "
        "no interval (measure at a finer resolution or a larger size)"
    )


def floored_note(step: float) -> str:
    return f"values on a {step:g} s grid: spread taken as at least the rounding's"
