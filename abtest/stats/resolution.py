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
  values (milliseconds on seconds are continuous for this purpose); a tick above 1 s only where
  the values take three of its points (prefer the smaller tick); failing that, the smallest step
  of ``TICKS`` (1 s and up) nine in ten values lie within 5 % of, over two or more grid points of
  those values (three above 1 s) and six values or more (whole seconds plus a watch's
  milliseconds: a batch ending on the 1 s relist); failing that, 1 s where nine in ten values lie
  within 5 % of a whole second, however few grid points they take (every round of 2.7 s of work
  ends on the same 3 s tick: one point, no spread to speak of, and the tick hides the change);
- the caller finds it once for a metric, over the whole run (every arm and size, and the node's
  earlier rounds where given: ``abtest.stats.contrast``), not per comparison, so a comparison
  whose own values sit on one tick inherits the grid the run shows;
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
    """The resolution of the values along the last axis; 0 where none is shown (see the
    module's docstring: an exact grid, else ticks nine in ten values lie near over two or more
    grid points, else every value near one whole tick)."""
    v = np.asarray(values, dtype=np.float64)
    shifted = v - v.min(axis=-1, keepdims=True)
    step = np.zeros(v.shape[:-1])
    varies = shifted.max(axis=-1) > 0
    scale = _ON_GRID * np.maximum(1.0, np.abs(v).max(axis=-1, keepdims=True))
    for q in reversed(STEPS):  # smallest first: a larger step that also fits overrides it
        k = shifted / q
        on = np.all(np.abs(k - np.round(k)) <= scale / q, axis=-1) & varies
        # a tick larger than the smallest that fits needs three of its points: whole seconds
        # that happen to be 5 and 7 are no 2 s grid (its floor and refusal were wrong there)
        on &= (q <= TICKS[-1]) | (step < TICKS[-1]) | (_points(np.round(k), on[..., None]) >= 3)
        step = np.where(on, q, step)
    least = MIN_RELATIVE_STEP * np.median(np.abs(v), axis=-1)
    # values on no coarse exact grid (none, or milliseconds) may still lie near a tick; only
    # those are searched (it costs more than the exact search)
    off = step < least
    if off.any():
        step[off] = _near_grid(v[off])
    return np.asarray(np.where(step < least, 0.0, step), dtype=np.float64)


def _points(k: FloatArray, counted: NDArray[np.bool_]) -> NDArray[np.int64]:
    """How many distinct grid points (``k`` rounded) the ``counted`` values take."""
    marked = np.sort(np.where(counted, k, np.nan), axis=-1)  # NaNs sort last
    new = np.diff(marked, axis=-1) > 0  # a comparison with NaN is False
    first = np.any(counted, axis=-1)
    return np.asarray(new.sum(axis=-1) + first, dtype=np.int64)


def _near_grid(v: FloatArray) -> FloatArray:
    """The smallest of ``TICKS`` whose grid (the offset the values' circular mean) nine in ten
    values lie within ``NEAR`` of a step of, over at least two grid points of those values
    (three for a tick above 1 s)
    (ticks are relists: 1 s, even where the values happen to sit on even seconds); failing
    that, the smallest tick when nine in ten lie within ``NEAR`` of a whole multiple (>= 1) of
    it; 0 where none. Both need ``NEAR_MIN_VALUES`` values; with fewer, only values exactly on
    whole ticks count.

    Batches that end on the kubelet's 1 s relist and start in step with it are whole seconds
    plus the milliseconds the watch takes: on no exact grid, yet as coarse as whole seconds
    (the plain t wrongly FAILed 5.3 % of ``lab-regression`` gates on them with 20 ms of jitter).
    Continuous values that near a grid by chance are rare: about 0.1 ** (0.9 n - 1). Nine in
    ten, not all: over a long history a jitter of 20 ms puts one value in 80 past 50 ms.

    Points are counted among the values near the grid only: one value in ten half a step off
    a 2 s grid made a second point of it, and 16-32 % of 1 s comparisons were refused on it.
    One point: 2.7 s of work that ends on the next 1 s tick is 3.0xx s in both arms, and a
    plain t on the milliseconds wrongly PASSed a true slowdown the tick hides (issue 46: 43 %
    at the margin). A quiet continuous metric within 50 ms of a whole second looks the same;
    it is refused too (the price: it cannot be told apart from the values alone)."""
    step = np.zeros(v.shape[:-1])
    enough = v.shape[-1] >= NEAR_MIN_VALUES
    for q in reversed(TICKS):  # smallest first, and the first that fits is kept
        turns = np.exp(2j * np.pi * v / q)
        centre = np.angle(turns.mean(axis=-1, keepdims=True)) / (2 * np.pi)
        k = v / q - centre
        close = np.abs(k - np.round(k)) <= NEAR
        near = np.mean(close, axis=-1) >= NEAR_SHARE
        points = _points(np.round(k), close)
        # above 1 s, three points, as on an exact grid: two tight arms 10 s apart (a 1.3 s
        # baseline, an 11.5 s slowdown) are two points of a "10 s grid" that is the effect
        fits = near & enough & (points >= (2 if q <= TICKS[-1] else 3)) & (step == 0)
        step = np.where(fits, q, step)
    # near a whole tick of one or more (milliseconds, a relist's own duration, are near 0 s);
    # with fewer than NEAR_MIN_VALUES values only exactly on it, as above
    whole = v / TICKS[-1]
    tolerance = NEAR if enough else _ON_GRID * max(1.0, float(np.abs(v).max(initial=0.0)))
    on_tick = (np.abs(whole - np.round(whole)) <= tolerance) & (np.round(whole) >= 1)
    one = np.mean(on_tick, axis=-1) >= NEAR_SHARE
    return np.asarray(np.where((step == 0) & one, TICKS[-1], step), dtype=np.float64)


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
    """Why a comparison on coarse data has no interval, and what to do about it."""
    return (
        f"values on a {step:g} s grid (rounds that end on a {step:g} s tick, or whole "
        f"seconds) vary by only {spread:.2g} s within an arm (under {COARSE_SPREAD:g} of the "
        "step): rounding is a bias more blocks do not remove, and a change smaller than the "
        "step may not show at all; no interval (measure a finer metric, or more pods per "
        "batch so that a batch spans several steps)"
    )


def floored_note(step: float) -> str:
    return f"values on a {step:g} s grid: spread taken as at least the rounding's"
