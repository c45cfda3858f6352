"""Planning by power: the smallest change a paired comparison can detect, and the blocks a
target change needs. Pure: frames and numbers in, numbers out.

The test this plans for is the one ``compare`` runs: a two-sided one-sample t on the per-block
log ratios ``log T_b - log B_b`` (df = n - 1), "detected" meaning the interval at the report's
confidence level excludes 0. Its power is computed exactly from the **noncentral t**
distribution (no normal or t approximation): with n blocks, a true log effect ``d`` and a
per-block SD ``s`` of the log ratio, the statistic is noncentral t with df = n - 1 and
noncentrality ``d * sqrt(n) / s``, and the power is ``P(|T| > t_crit)``. The only assumption is
the t test's own: per-block log ratios roughly normal with SD ``s``. ``s`` is plugged in as if
known (from history or from the run itself), which is what makes this a plan, not a promise.

Percent, both directions. A change of p % (either a reduction or an increase of p %) is at least
``log(1 + p/100)`` on the log scale (a p % reduction is ``-log(1 - p/100)``, which is larger), so
a minimum detectable effect ``d`` is reported as ``(exp(d) - 1) * 100`` %: any change of at
least that many percent, in either direction, has power >= the target. ``blocks_needed`` uses
the same rule, so "5 %" is planned for the harder direction (a 5 % slowdown).

Noise from history. Earlier runs on the same node and size give rounds of several arms in
blocks. Arms may have real effects and blocks their own level, so the noise is the residual of
``log(metric) ~ block + arm`` within each (run, size) (two-way, no interaction), pooled over the
runs with its degrees of freedom; the SD of a within-block log difference between two arms is
``sqrt(2)`` times that residual SD. With two arms this is exactly the SD of the paired log
differences divided by ``sqrt(2)``, so both definitions agree.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as sps

from abtest.errors import UserError
from abtest.stats.compare import Comparison
from abtest.stats.intervals import check_confidence

POWER = 0.80
# Stated default when the node has no usable history: a paired log-ratio SD of 0.10, i.e.
# block-to-block noise of the ratio of about 10 %, about what the 2-core lab shows at 10-20 pods.
DEFAULT_SD_LOG_DIFF = 0.10
MAX_BLOCKS = 10_000
GROUP = "group"  # the column that separates independent (run, size) groups in a history frame


@dataclass(frozen=True)
class Noise:
    """Round-to-round noise of one metric at one size, on the log scale, paired by block."""

    metric: str
    size: int
    sd_log_diff: float  # SD of a within-block log difference between two arms
    df: int  # degrees of freedom of the estimate (0 for the default)
    n_rounds: int  # rounds the estimate is made of
    n_runs: int
    source: str  # "history: ..." or "default: ..."

    @property
    def from_history(self) -> bool:
        return self.df > 0


@dataclass(frozen=True)
class Detectable:
    """What a comparison with ``n_blocks`` pairs can detect, and how it was worked out."""

    mde_log: float  # smallest |log ratio| detected with ``power`` (math.inf if none)
    mde_pct: float  # (exp(mde_log) - 1) * 100: a change of this many % either way
    n_blocks: int
    sd_log_diff: float
    confidence: float
    power: float


def check_power(power: float) -> None:
    if not (0.0 < power < 1.0):
        raise UserError(f"power {power!r} is not between 0 and 1", "power", "give e.g. 0.8")


def paired_power(effect_log: float, sd_log_diff: float, n_blocks: int, confidence: float) -> float:
    """Power of the two-sided paired t at ``confidence`` for a true log effect ``effect_log``."""
    check_confidence(confidence)
    if n_blocks < 2:
        return 0.0
    df = n_blocks - 1
    crit = float(sps.t.ppf(0.5 + confidence / 2.0, df))
    ncp = abs(effect_log) * math.sqrt(n_blocks) / sd_log_diff
    # P(T < -crit | ncp) written as P(T > crit | -ncp): scipy's nct.cdf far in the lower tail
    # returns NaN at large df, its sf there is a clean 0
    return float(sps.nct.sf(crit, df, ncp) + sps.nct.sf(crit, df, -ncp))


def mde_log(sd_log_diff: float, n_blocks: int, confidence: float, power: float = POWER) -> float:
    """Smallest |log effect| the paired t detects with ``power`` (math.inf below 2 blocks)."""
    check_confidence(confidence)
    check_power(power)
    _check_sd(sd_log_diff)
    if n_blocks < 2:
        return math.inf
    if sd_log_diff == 0.0:
        return 0.0
    # power rises monotonically in the effect; bracket it, then solve
    hi = sd_log_diff
    while paired_power(hi, sd_log_diff, n_blocks, confidence) < power:
        hi *= 2.0
    return float(
        optimize.brentq(
            lambda d: paired_power(d, sd_log_diff, n_blocks, confidence) - power,
            0.0,
            hi,
            xtol=1e-10,
        )
    )


def detectable(
    sd_log_diff: float, n_blocks: int, confidence: float, power: float = POWER
) -> Detectable:
    d = mde_log(sd_log_diff, n_blocks, confidence, power)
    return Detectable(d, pct_of_log(d), n_blocks, sd_log_diff, confidence, power)


_LOG_FLOAT_MAX = math.log(sys.float_info.max)


def pct_of_log(effect_log: float) -> float:
    """A log effect as the percent change it is at least, in either direction.

    Two blocks that disagree by a third give a detectable log effect in the thousands (the t on
    one degree of freedom); its percent is past any float, and "no change is detectable" is inf.
    """
    if effect_log >= _LOG_FLOAT_MAX:
        return math.inf
    return (math.exp(effect_log) - 1.0) * 100.0


def log_of_pct(pct: float) -> float:
    """The smallest |log effect| a change of ``pct`` % can be (the slowdown direction)."""
    if not (0.0 < pct < 100.0):
        raise UserError(
            f"a change of {pct!r} % cannot be planned for",
            "--detect",
            "give a percent between 0 and 100, e.g. 5%",
        )
    return math.log1p(pct / 100.0)


def blocks_needed(
    sd_log_diff: float, effect_pct: float, confidence: float, power: float = POWER
) -> int | None:
    """Fewest blocks whose paired t detects a change of ``effect_pct`` % with ``power``;
    None when even ``MAX_BLOCKS`` would not."""
    check_power(power)
    _check_sd(sd_log_diff)
    effect = log_of_pct(effect_pct)
    if sd_log_diff == 0.0:
        return 2
    if paired_power(effect, sd_log_diff, MAX_BLOCKS, confidence) < power:
        return None
    lo, hi = 1, 2  # invariant: power(lo) < target <= power(hi)
    while paired_power(effect, sd_log_diff, hi, confidence) < power:
        lo, hi = hi, min(hi * 2, MAX_BLOCKS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if paired_power(effect, sd_log_diff, mid, confidence) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def default_noise(metric: str, size: int, why: str) -> Noise:
    return Noise(
        metric,
        size,
        DEFAULT_SD_LOG_DIFF,
        0,
        0,
        0,
        f"default: paired log SD {DEFAULT_SD_LOG_DIFF} ({why})",
    )


def noise_from_history(history: pd.DataFrame, *, metric: str, size: int) -> Noise:
    """Pooled residual noise of ``log(metric)`` after block and arm effects, from earlier runs.

    ``history`` has columns ``group`` (one per run: blocks of different runs do not pair),
    ``block``, ``arm``, ``size`` and ``metric``; only accepted, non-warm-up rounds belong in
    it. Groups with fewer than 2 blocks or 2 arms carry no paired information and are left
    out; with no residual degrees of freedom at all, the stated default is returned.
    """
    ss, df, n_rounds, n_runs = 0.0, 0, 0, 0
    for table in paired_tables(history, metric=metric, size=size):
        logs = np.log(table.to_numpy(dtype=np.float64))
        b, a = logs.shape
        resid = (
            logs - logs.mean(axis=1, keepdims=True) - logs.mean(axis=0, keepdims=True) + logs.mean()
        )
        ss += float((resid**2).sum())
        df += (b - 1) * (a - 1)
        n_rounds += b * a
        n_runs += 1
    if df == 0:
        return default_noise(metric, size, "no earlier paired rounds on this node at this size")
    sd = math.sqrt(2.0 * ss / df)
    return Noise(
        metric,
        size,
        sd,
        df,
        n_rounds,
        n_runs,
        f"history: {n_rounds} rounds in {n_runs} run(s), residual df {df}",
    )


def paired_tables(history: pd.DataFrame, *, metric: str, size: int) -> list[pd.DataFrame]:
    """Each run's rounds of ``metric`` at ``size`` as a (blocks x arms) table of raw values,
    complete blocks only (repeats in a cell averaged on the log scale); runs with fewer than
    2 such blocks or 2 arms carry no paired information and are left out."""
    return [table for _, table in run_tables(history, metric=metric, size=size)]


def run_tables(history: pd.DataFrame, *, metric: str, size: int) -> list[tuple[str, pd.DataFrame]]:
    """``paired_tables``, each with its run's name (the plan matches one run's block across
    metrics and sizes by it)."""
    rows = history[(history["size"] == size) & history[metric].notna()]
    rows = rows[rows[metric] > 0]
    tables = []
    for name, group in rows.groupby(GROUP, sort=False):
        logs = group.assign(value=np.log(group[metric].to_numpy(dtype=np.float64)))
        cells = logs.groupby(["block", "arm"])["value"].mean().unstack("arm")
        complete = cells.dropna(axis=0, how="any")
        # an arm missing from most blocks would empty the table: keep the arms of most blocks
        if len(complete) < 2:
            kept = cells.columns[cells.notna().sum() >= 2]
            complete = cells[kept].dropna(axis=0, how="any")
        if complete.shape[0] >= 2 and complete.shape[1] >= 2:
            raw = np.exp(complete.to_numpy(dtype=np.float64))
            table = pd.DataFrame(raw, index=complete.index, columns=complete.columns)
            tables.append((str(name), table))
    return tables


def achieved(c: Comparison, power: float = POWER) -> Detectable | None:
    """What a paired comparison could detect, from its own noise (its interval's width).

    The interval on the log scale is ``mean +- t_crit * se`` with df = pairs - 1, so its width
    gives the run's own standard error; None when the comparison is unpaired or has no interval
    (the MDE would need an SD the comparison does not have).
    """
    if c.method != "paired" or c.ratio_ci is None or c.n_pairs < 2:
        return None
    lo, hi = (math.log(x) for x in c.ratio_ci)
    crit = float(sps.t.ppf(0.5 + c.confidence / 2.0, c.n_pairs - 1))
    se = (hi - lo) / 2.0 / crit
    return detectable(se * math.sqrt(c.n_pairs), c.n_pairs, c.confidence, power)


def _check_sd(sd_log_diff: float) -> None:
    if not (sd_log_diff >= 0.0 and math.isfinite(sd_log_diff)):
        raise UserError(f"noise SD {sd_log_diff!r} is not a finite number >= 0", "power")
