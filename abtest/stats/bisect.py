"""Which build made it slower: the decisions of `abtest bisect`, and what they cost in errors.

A bisection runs over an ordered list of builds ``b0 .. b(n-1)``: ``b0`` the good end, the last
the bad. It first confirms the ends differ with the regression gate itself (bad as candidate,
good as reference: FAIL = bad slower than good by more than the margin; anything else stops the
search). Then each step measures the middle build ``mid`` of the open range ``(low, high)``
against both ends in randomized blocks and asks in which half the slowdown lies, with the gate's
sequential machinery: paired log-scale intervals (resolution-aware, as the gate's), looks
planned in advance (``rounds``, ``2 x rounds``, ... up to the cap), each interval at the
Bonferroni level ``1 - alpha / (looks x 2)`` over the step's two intervals:

- ``low -> mid`` (mid vs low) and ``mid -> high`` (high vs mid), slowdowns in percent;
- only ``low -> mid`` slower (its interval above 0): BAD, mid is on the bad side and the search
  goes to ``(low, mid]``; only ``mid -> high`` slower: GOOD, to ``(mid, high]``;
- both slower at once: SPREAD, the effect lies in both halves (no one culprit);
- neither at a look: more blocks; neither at the cap: UNRESOLVED, the step could not be placed
  (spread thinly over the range, or too small for the cap). A search that ends SPREAD or
  UNRESOLVED says so instead of naming a build.

The endpoints were confirmed slower beyond the margin, so inside the range the question is only
where: each half is tested against 0 (no change), not against the margin, which would need
each half's lower bound above the margin and place fewer steps (simulated with the settings of
docs/statistics.md: against the margin a 20 % step was named 82-91 % of the time over 4-16
builds, a 10 % step under 1 %; against 0, 95-98 % and 8-14 %).

The search ends when ``high`` is ``low + 1``: ``high`` is the first bad build, and its step is
the half of the last step it ended. Each step is a chance to go the wrong way; with
``s = ceil(log2(n - 1))`` steps and a per-step error rate ``e`` the culprit is named wrongly with
probability ``1 - (1 - e)^s <= s * e`` (steps measure afresh, so their errors are independent):
:func:`compounded`. ``tests/unit/stats/test_bisect_calibration.py`` measures whole searches by
simulation (:mod:`abtest.stats.bisect_sim`); docs/statistics.md has the figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from abtest.errors import UserError
from abtest.stats.intervals import FloatArray
from abtest.stats.regress_decision import look_confidence
from abtest.stats.resolution import grid_step, paired_coarse

#: over cells (..., blocks, [low, mid, high]): log mid - log low; log high - log mid
LOW_MID = np.array([-1.0, 1.0, 0.0])
MID_HIGH = np.array([0.0, -1.0, 1.0])
#: a step's outcome codes
GOOD, BAD, SPREAD, UNRESOLVED, MORE = 0, 1, 2, 3, 4
OUTCOMES = ("GOOD", "BAD", "SPREAD", "UNRESOLVED", "MORE")
#: the two intervals of a step share the family's alpha with its looks
STEP_DECISIONS = 2

Interval = tuple[FloatArray, FloatArray, FloatArray]  # estimate, lower, upper


@dataclass(frozen=True)
class StepLook:
    """One look at a bisection step, elementwise over simulated (or one real) steps."""

    outcome: FloatArray  # codes GOOD .. MORE
    #: slowdowns in percent with their intervals at the look's level (NaN bounds: none)
    low_mid_pct: Interval  # mid vs low
    mid_high_pct: Interval  # high vs mid
    level: float


def contrast_pct(
    cells: FloatArray, coef: FloatArray, level: float, resolution_aware: bool = True
) -> Interval:
    """Estimate and bounds of ``exp(sum coef * log x) - 1`` in percent over blocks: the gate's
    paired, resolution-aware interval over cells (..., blocks, arms); NaN bounds where none."""
    x = np.asarray(cells, dtype=np.float64)
    lead, blocks, arms = x.shape[:-2], x.shape[-2], x.shape[-1]
    step = grid_step(x.reshape(*lead, blocks * arms)) if resolution_aware else np.zeros(lead)
    result = paired_coarse(x, coef, step, level, log=True).intervals
    # no variation at all is no interval (INCONCLUSIVE), as in the gate
    spread = np.where(result.se > 0, 0.0, np.nan)
    est, lo, hi = (
        np.asarray((np.exp(v) - 1.0) * 100.0, dtype=np.float64)
        for v in (result.estimate, result.lo + spread, result.hi + spread)
    )
    return est, lo, hi


def step_look(
    cells: FloatArray,
    *,
    look: int,
    max_looks: int,
    confidence: float,
    resolution_aware: bool = True,
) -> StepLook:
    """The step's outcome at look ``look`` of ``max_looks`` from cells (..., blocks, 3) holding
    low, mid and high per block (complete blocks only)."""
    level = look_confidence(confidence, max_looks, STEP_DECISIONS)
    lm = contrast_pct(cells, LOW_MID, level, resolution_aware)
    mh = contrast_pct(cells, MID_HIGH, level, resolution_aware)
    with np.errstate(invalid="ignore"):
        outcome = decide(lm[1] > 0, mh[1] > 0, look >= max_looks)
    return StepLook(outcome, lm, mh, level)


def decide(low_slower: npt.ArrayLike, high_slower: npt.ArrayLike, last: bool) -> FloatArray:
    """A step's outcome from which halves are slower (their intervals above 0); at the last
    look, nothing decided is UNRESOLVED."""
    a, b = np.asarray(low_slower, dtype=bool), np.asarray(high_slower, dtype=bool)
    out = np.where(a & ~b, float(BAD), np.where(b & ~a, float(GOOD), float(MORE)))
    out = np.where(a & b, float(SPREAD), out)
    if last:
        out = np.where(out == MORE, float(UNRESOLVED), out)
    return np.asarray(out, dtype=np.float64)


def cells_of(rounds: pd.DataFrame, arms: Sequence[str], size: int, metric: str) -> FloatArray:
    """A run's rounds at one size as cells (blocks, arms) of ``metric``, complete blocks only
    (a block missing an arm's round pairs nothing)."""
    at = rounds[rounds["size"] == size]
    wide = at.pivot_table(index="block", columns="arm", values=metric, aggfunc="mean")
    wide = wide.reindex(columns=list(arms)).dropna()
    return np.asarray(wide.to_numpy(dtype=np.float64), dtype=np.float64)


def middle(low: int, high: int) -> int:
    """The build to measure next between ``low`` (good) and ``high`` (bad); needs a gap."""
    if high - low < 2:
        raise ValueError(f"no build between {low} and {high}")
    return (low + high) // 2


def next_range(low: int, high: int, mid: int, outcome: int) -> tuple[int, int]:
    """The range after a step decided GOOD (mid is good) or BAD (mid is bad)."""
    if outcome == GOOD:
        return mid, high
    if outcome == BAD:
        return low, mid
    raise ValueError(f"outcome {OUTCOMES[outcome]} moves no end")


def steps_needed(builds: int) -> int:
    """Steps a bisection of ``builds`` builds (the two ends included) takes at most:
    ``ceil(log2(builds - 1))`` (none for two builds: the ends are the answer)."""
    if builds < 2:
        raise UserError(f"{builds} build(s) make no range", "abtest bisect", "give two or more")
    return math.ceil(math.log2(builds - 1))


def compounded(per_step_error: float, steps: int) -> float:
    """The chance that at least one of ``steps`` independent steps goes the wrong way, each
    with ``per_step_error``: ``1 - (1 - e)^steps`` (at most ``steps * e``, the union bound)."""
    if not 0.0 <= per_step_error <= 1.0:
        raise ValueError(f"an error rate is a probability, got {per_step_error}")
    return 1.0 - (1.0 - per_step_error) ** steps
