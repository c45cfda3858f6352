"""Planning by power from the node's own rounds (issue 37 §4): simulated experiments through
the analysis's own rule, counted.

A comparison "detects" a change when the report prints a percent interval that excludes 0:
``compare``'s paired analysis of the per-block log ratios, with the metric's resolution found
on all of the pair's values and the SD floored at the rounding's or the interval refused
(``grid_step`` + ``paired_coarse``), and no interval where the ratios do not vary
(``no_variation``). ``detects`` is that rule on arrays; a test holds it to ``compare_pair``
frame by frame. Experiments are drawn from a ``RoundModel`` of the node's history, the effect
applied to the work before the rounds are put on the grid.

A change of p % is planned for both directions (a p % slowdown and a p % reduction) and the
power reported is the smaller one: "either way", as the normal model's MDE is. Deterministic
(seeded common random numbers); ``SIMULATIONS`` experiments per point keep a plan to a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from abtest.stats.intervals import FloatArray, check_confidence, no_variation
from abtest.stats.plan_interval import scaled, sd_factors
from abtest.stats.power import POWER, check_power, log_of_pct
from abtest.stats.resolution import grid_step, paired_coarse
from abtest.stats.round_model import Draws, RoundModel, draws, simulate

SIMULATIONS = 1_000
#: blocks_needed looks no further than this (a plan beyond it is "more than 100 blocks")
MAX_SIM_BLOCKS = 100
SEED = 37
#: the MDE is looked for up to this change: beyond it a reduction puts whole-second rounds on
#: their floor of one tick, where the analysis refuses them, so power stops growing with it
MAX_MDE_PCT = 50.0
_SLOWER = np.array([-1.0, 1.0])  # log candidate - log reference; cells are (reference, cand.)


@dataclass(frozen=True)
class SimPlan:
    """What the node's rounds say one comparison can do; ``power_at`` for ``detect_pct``."""

    mde_pct: float  # smallest change (either way) detected with ``power``, inf: none to 50 %
    blocks: int
    detect_pct: float | None
    power_at: float | None  # power for detect_pct at ``blocks`` (the smaller direction)
    blocks_needed: int | None  # for detect_pct; None when not asked or > MAX_SIM_BLOCKS
    power: float
    simulations: int
    #: power_at's ``plan_interval.LEVEL`` interval from the uncertainty of the rounds' noise;
    #: None when not asked, or on rounds that end on ticks (``abtest.stats.plan_interval``)
    power_interval: tuple[float, float] | None = None


def detects(cells: FloatArray, confidence: float, continuous: bool = False) -> NDArray[np.bool_]:
    """Whether ``compare`` would print a percent interval excluding 0, per experiment.

    ``cells``: raw times shaped (..., blocks, 2), the reference first. ``continuous`` skips
    looking for a grid where none can be (times drawn as continuous numbers; half the cost)."""
    flat = cells.reshape(*cells.shape[:-2], -1)
    step = np.zeros(flat.shape[:-1]) if continuous else grid_step(flat)
    found = paired_coarse(cells, _SLOWER, step, confidence, log=True)
    r = found.intervals
    # as ``estimate_contrast``: no variation is judged against the log values' magnitude
    magnitude = 2.0 * np.maximum(1.0, np.abs(np.log(flat)).max(axis=-1))
    given = ~found.coarse & ~no_variation(r.se, magnitude)
    return np.asarray(given & ((r.lo > 0) | (r.hi < 0)), dtype=np.bool_)


def power_for(
    model: RoundModel, d: Draws, pct: float, blocks: int, confidence: float
) -> tuple[float, float]:
    """(power for a ``pct`` % slowdown, for a ``pct`` % reduction) at ``blocks`` blocks."""
    out = []
    for effect in (math.log1p(pct / 100.0), math.log1p(-pct / 100.0)):
        cells = simulate(model, d, np.array([0.0, effect]), blocks)
        out.append(float(detects(cells, confidence, model.tick == 0).mean()))
    return out[0], out[1]


def either_way(model: RoundModel, d: Draws, pct: float, blocks: int, confidence: float) -> float:
    return min(power_for(model, d, pct, blocks, confidence))


def simulated_mde(
    model: RoundModel, d: Draws, blocks: int, confidence: float, power: float = POWER
) -> float:
    """Smallest change (percent, either way, to 0.1) the comparison detects with ``power``;
    inf when none up to ``MAX_MDE_PCT`` is."""
    if blocks < 2 or either_way(model, d, MAX_MDE_PCT, blocks, confidence) < power:
        return math.inf
    lo, hi = 0.0, MAX_MDE_PCT
    while hi - lo > 0.1:
        mid = (lo + hi) / 2.0
        if either_way(model, d, mid, blocks, confidence) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def simulated_blocks_needed(
    model: RoundModel, d: Draws, pct: float, confidence: float, power: float = POWER
) -> int | None:
    """Fewest blocks (up to the draws' blocks) reaching ``power`` for ``pct`` % either way."""
    cap = int(d.block.shape[1])
    if either_way(model, d, pct, cap, confidence) < power:
        return None
    lo, hi = 2, cap  # power grows with the blocks (common random numbers keep it near monotone)
    if either_way(model, d, pct, lo, confidence) >= power:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if either_way(model, d, pct, mid, confidence) >= power else (mid, hi)
    return hi


def plan_from_rounds(
    model: RoundModel,
    blocks: int,
    confidence: float,
    detect_pct: float | None = None,
    power: float = POWER,
    simulations: int = SIMULATIONS,
    seed: int = SEED,
) -> SimPlan:
    """The MDE at ``blocks`` and, with ``detect_pct``, its power there and the blocks it needs."""
    check_confidence(confidence)
    check_power(power)
    if detect_pct is not None:
        log_of_pct(detect_pct)  # the same refusal as the normal model's
    most = max(blocks, MAX_SIM_BLOCKS if detect_pct is not None else blocks, 2)
    d = draws(model, simulations, most, seed)
    mde = simulated_mde(model, d, blocks, confidence, power)
    power_at = needed = sure = None
    if detect_pct is not None:
        power_at = either_way(model, d, detect_pct, blocks, confidence) if blocks >= 2 else 0.0
        needed = simulated_blocks_needed(model, d, detect_pct, confidence, power)
        sure = _power_interval(model, d, detect_pct, blocks, confidence)
    return SimPlan(mde, blocks, detect_pct, power_at, needed, power, simulations, sure)


def _power_interval(
    model: RoundModel, d: Draws, pct: float, blocks: int, confidence: float
) -> tuple[float, float] | None:
    """The power again with the rounds' noise at both ends of its interval (the same draws);
    none on tick-ended rounds, where the noise does not decide it (``plan_interval``)."""
    if blocks < 2 or model.tick > 0 or model.df <= 0:
        return None
    ends = [either_way(scaled(model, f), d, pct, blocks, confidence) for f in sd_factors(model.df)]
    return min(ends), max(ends)
