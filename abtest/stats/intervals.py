"""The numerical core: vectorised t-intervals, Holm adjustment and scale transforms.

Every function works along the last axis, so the very same code computes one comparison
(1-D arrays) and the calibration simulation (thousands of simulated experiments at once, one
per row). The tests' coverage figures are therefore figures for the code ``compare()`` runs.

Two interval families are used, both Student-t based because small samples (5 blocks) are the
normal case and a normal approximation would be visibly too narrow there:

- one-sample t on per-block values (the paired analysis: each block's contrast, e.g. the log
  ratio ``log T_b - log B_b``), df = n_blocks - 1;
- Welch-Satterthwaite t for a linear contrast of independent group means (``sum c_g * mean_g``),
  which for two groups is the ordinary Welch two-sample interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from abtest.errors import UserError

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class TIntervals:
    """Estimates with two-sided t-intervals, elementwise (shape = input shape minus last axis).

    ``p_value`` is two-sided for the null hypothesis "the true value is 0". Where the standard
    error is 0 (no variation at all) the interval is degenerate and the p-value is NaN: callers
    report "no interval" rather than a zero-width one.
    """

    estimate: FloatArray
    lo: FloatArray
    hi: FloatArray
    p_value: FloatArray
    se: FloatArray
    df: FloatArray


# Below this fraction of the data's magnitude, a standard error is floating-point rounding, not
# variation between rounds: 0.9 x B is not exact in binary, so a constant ratio leaves per-block
# log ratios that differ in the last bits (se ~ 1e-17), and a plain `se > 0` would turn that into
# a zero-width interval and p ~ 1e-47. Measured times carry at most microsecond resolution, i.e.
# relative variation far above 1e-9, so real spread is never mistaken for none.
RELATIVE_TOLERANCE = 1e-9


def no_variation(se: ArrayLike, magnitude: ArrayLike) -> NDArray[np.bool_]:
    """True where ``se`` is no real variation for data of size ``magnitude`` (same scale).

    ``magnitude`` is the largest absolute value that went into the estimate times the sum of
    the absolute contrast coefficients: the size of the rounding error the arithmetic can make.
    """
    se_arr = np.asarray(se, dtype=np.float64)
    limit = RELATIVE_TOLERANCE * np.abs(np.asarray(magnitude, dtype=np.float64))
    return np.asarray(~(se_arr > limit), dtype=np.bool_)


def check_confidence(confidence: float) -> None:
    """Raise UserError unless 0 < confidence < 1 (0.95, not 95)."""
    if not (0.0 < confidence < 1.0):
        raise UserError(
            f"confidence {confidence!r} is not between 0 and 1",
            "--confidence",
            "give a fraction such as 0.95",
        )


def _finish(estimate: FloatArray, se: FloatArray, df: FloatArray, confidence: float) -> TIntervals:
    check_confidence(confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        crit = np.asarray(sps.t.ppf(0.5 + confidence / 2.0, df), dtype=np.float64)
        half = crit * se
        t_stat = estimate / se
        p_value = np.asarray(2.0 * sps.t.sf(np.abs(t_stat), df), dtype=np.float64)
    p_value = np.where(se > 0, p_value, np.nan)
    return TIntervals(
        estimate=estimate,
        lo=estimate - half,
        hi=estimate + half,
        p_value=p_value,
        se=se,
        df=df,
    )


def one_sample_t(values: ArrayLike, confidence: float) -> TIntervals:
    """t-interval for the mean of ``values`` along the last axis (needs >= 2 values)."""
    data = np.asarray(values, dtype=np.float64)
    n = data.shape[-1]
    if n < 2:
        raise ValueError("one_sample_t needs at least 2 values along the last axis")
    estimate = np.asarray(data.mean(axis=-1), dtype=np.float64)
    se = np.asarray(data.std(axis=-1, ddof=1) / np.sqrt(n), dtype=np.float64)
    df = np.full_like(estimate, float(n - 1))
    return _finish(estimate, se, df, confidence)


def welch_contrast(
    means: ArrayLike,
    variances: ArrayLike,
    counts: ArrayLike,
    coefficients: ArrayLike,
    confidence: float,
) -> TIntervals:
    """Welch-Satterthwaite t-interval for ``sum_g c_g * mean_g`` of independent groups.

    Groups are on the last axis. Variances are sample variances (ddof=1); every count must be
    >= 2. The degrees of freedom are ``(sum w_g)^2 / sum(w_g^2 / (n_g - 1))`` with
    ``w_g = c_g^2 s_g^2 / n_g``.
    """
    mean_arr = np.asarray(means, dtype=np.float64)
    var_arr = np.asarray(variances, dtype=np.float64)
    n_arr = np.asarray(counts, dtype=np.float64)
    coef = np.asarray(coefficients, dtype=np.float64)
    if np.any(n_arr < 2):
        raise ValueError("welch_contrast needs at least 2 observations per group")
    weights = coef**2 * var_arr / n_arr
    se2 = weights.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = se2**2 / (weights**2 / (n_arr - 1.0)).sum(axis=-1)
    estimate = np.asarray((coef * mean_arr).sum(axis=-1), dtype=np.float64)
    return _finish(estimate, np.sqrt(se2), np.asarray(df, dtype=np.float64), confidence)


def welch_t(x: ArrayLike, y: ArrayLike, confidence: float) -> TIntervals:
    """Welch two-sample t-interval for ``mean(x) - mean(y)`` along the last axis."""
    x_arr = np.asarray(x, dtype=np.float64)
    y_arr = np.asarray(y, dtype=np.float64)
    means = np.stack([x_arr.mean(axis=-1), y_arr.mean(axis=-1)], axis=-1)
    variances = np.stack([x_arr.var(axis=-1, ddof=1), y_arr.var(axis=-1, ddof=1)], axis=-1)
    counts = np.array([x_arr.shape[-1], y_arr.shape[-1]], dtype=np.float64)
    return welch_contrast(means, variances, counts, [1.0, -1.0], confidence)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm step-down adjusted p-values; ``None`` entries are left out and stay ``None``.

    With the m present p-values sorted ascending, the adjusted j-th is
    ``max_{i <= j} min(1, (m - i + 1) * p_(i))``: it controls the family-wise error rate across
    the comparisons of one table without assuming they are independent.
    """
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[index] = running
    return adjusted


def pct_reduction_from_log_ratio(log_ratio: float) -> float:
    """Percent reduction ``(1 - T/B) * 100`` from ``log(T/B)``."""
    return float((1.0 - np.exp(log_ratio)) * 100.0)


def pct_change_from_log_ratio(log_ratio: float) -> float:
    """Percent change (slowdown when positive) ``(T/B - 1) * 100`` from ``log(T/B)``."""
    return float((np.exp(log_ratio) - 1.0) * 100.0)


def pct_reduction_ci(log_ci: tuple[float, float]) -> tuple[float, float]:
    """A ``log(T/B)`` interval as a percent-reduction interval: a higher ratio is a smaller
    reduction, so the bounds swap."""
    lo, hi = log_ci
    return (pct_reduction_from_log_ratio(hi), pct_reduction_from_log_ratio(lo))


def ratio_and_pct_ci(
    log_ci: tuple[float, float] | None,
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """A ``log(T/B)`` interval as the ratio's interval and the percent reduction's; both None
    when there is no interval."""
    if log_ci is None:
        return None, None
    lo, hi = log_ci
    return (float(np.exp(lo)), float(np.exp(hi))), pct_reduction_ci(log_ci)


def lognormal_mean_interval(log_values: ArrayLike, confidence: float) -> TIntervals:
    """Cox's interval for the arithmetic mean of log-normal values, from their logs.

    ``exp(m + s^2 / 2)`` is the mean of a log-normal with log-mean ``m`` and log-variance
    ``s^2``; the interval is ``m + s^2/2 +- t * sqrt(s^2/n + s^4 / (2 (n - 1)))`` on the log
    scale, transformed back (``lo``/``hi``/``estimate`` are returned on the log scale; the
    caller exponentiates). Round times are skewed, and a plain t-interval on the raw values
    undercovers a mean of 5 blocks under heavy noise (90.6 % in the issue-26 audit); this
    holds 93.8-94.7 % up to a log SD of 0.8 (``tests/unit/stats/test_stats_skew_calibration.py``).
    """
    data = np.asarray(log_values, dtype=np.float64)
    n = data.shape[-1]
    if n < 2:
        raise ValueError("lognormal_mean_interval needs at least 2 values along the last axis")
    s2 = np.asarray(data.var(axis=-1, ddof=1), dtype=np.float64)
    estimate = np.asarray(data.mean(axis=-1) + s2 / 2.0, dtype=np.float64)
    se = np.asarray(np.sqrt(s2 / n + s2**2 / (2.0 * (n - 1))), dtype=np.float64)
    df = np.full_like(estimate, float(n - 1))
    return _finish(estimate, se, df, confidence)
