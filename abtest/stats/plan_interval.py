"""How sure a gate's plan is of its own rates (issue 46): an interval beside each planned rate.

Why. A plan's rates come from the noise of 40 or so history rounds, and the rate is steep in the
noise: from one 40-round history to the next the planned FAIL rate at twice the margin moves by
9-16 points (SD), which a single figure hides. The uncertainty that dominates is the noise's
own: the paired SD estimated on ``df`` residual degrees of freedom. Its ``LEVEL`` interval is
``sd * sqrt(df / chi2)`` at the two chi-square quantiles; both planned rates fall as the noise
grows, so the gate's rates at the two ends (the same simulated rounds, the noise scaled: common
random numbers) are an interval for each rate.

Why not a bootstrap of the history's blocks: with 5 blocks a run it under-states the spread
(resampling 5 things repeats them): on normal rounds its 90 % interval (30 resamples) held the
gate's rate in 60-80 % of 10 40-round histories; this one holds it in 90-98 % of 100
(tests/unit/stats/test_regress_plan_interval.py). Not for rounds that end on ticks: there the
rate turns on where the level sits against the tick more than on the noise, scaling the noise
barely moves it, and such an interval missed the gate's rate in 97.5-100 % of 40 histories, so
the plan states none and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from abtest.stats.round_model import RoundModel

LEVEL = 0.90


@dataclass(frozen=True)
class RateInterval:
    """``LEVEL`` intervals of the planned rates, or none and why (``why_none``)."""

    level: float
    df: int  # degrees of freedom of the noise the interval is made from
    pass_if_unchanged: tuple[float, float] | None
    fail_if_twice_margin: tuple[float, float] | None
    why_none: str = ""


def sd_factors(df: int, level: float = LEVEL) -> tuple[float, float]:
    """(low, high) multipliers of an SD estimated on ``df`` degrees of freedom: its ``level``
    confidence interval, sd * sqrt(df / chi2 quantile)."""
    tail = (1.0 - level) / 2.0
    low = math.sqrt(df / float(sps.chi2.ppf(1.0 - tail, df)))
    high = math.sqrt(df / float(sps.chi2.ppf(tail, df)))
    return low, high


def scaled(model: RoundModel, factor: float) -> RoundModel:
    """``model`` with its rounds' own noise ``factor`` times as large (levels unchanged)."""
    return replace(
        model,
        residuals=np.asarray(model.residuals * factor, dtype=np.float64),
        round_sd=model.round_sd * factor,
        work_sd=model.work_sd * factor,
    )


def no_interval(why: str, df: int = 0, level: float = LEVEL) -> RateInterval:
    return RateInterval(level, df, None, None, why)
