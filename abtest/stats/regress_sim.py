"""The regression gate's overall verdict, vectorized over many simulated gates.

The same rule ``regression_decision`` + ``overall_verdict`` apply to one gate, applied to
arrays: at each planned look the paired interval of every decision (``paired_coarse``: the
t-interval, its SD floored at the rounding's on coarse data, refused where too coarse) at the
Bonferroni level, the worst decision wins, and the gate stops at the first look that is not
INCONCLUSIVE. Calibration tests and the gate's plan both run this, so the rates they print are
rates of the gate's own code.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from abtest.stats.intervals import FloatArray
from abtest.stats.regress_decision import classify, look_confidence
from abtest.stats.resolution import grid_step, paired_coarse

SLOWDOWN = np.array([-1.0, 1.0])  # log candidate - log reference; cells are (reference, cand.)


def regress_codes(
    cells: FloatArray,
    looks: Sequence[int],
    confidence: float,
    margin_pct: float,
    *,
    resolution_aware: bool = True,
) -> FloatArray:
    """Overall verdict codes (0 PASS, 1 INCONCLUSIVE, 2 FAIL), one per simulated gate.

    ``cells``: raw times shaped (gates, decisions, blocks, 2) with the reference first and at
    least ``looks[-1]`` blocks. ``resolution_aware=False`` is the plain t-interval (what the
    gate ran before issue 37, and all that continuous simulated data need).
    """
    return regress_outcome(cells, looks, confidence, margin_pct, resolution_aware)[0]


def regress_outcome(
    cells: FloatArray,
    looks: Sequence[int],
    confidence: float,
    margin_pct: float,
    resolution_aware: bool = True,
) -> tuple[FloatArray, FloatArray]:
    """``regress_codes`` and the blocks each gate measured (it stops at its first decided look)."""
    gates, decisions = cells.shape[0], cells.shape[1]
    level = look_confidence(confidence, len(looks), decisions)
    final: FloatArray = np.ones(gates)
    spent: FloatArray = np.full(gates, float(looks[-1]))
    undecided = np.ones(gates, dtype=bool)
    for blocks in looks:
        look = cells[:, :, :blocks, :]
        if resolution_aware:
            step = grid_step(look.reshape(gates, decisions, blocks * 2))
        else:
            step = np.zeros((gates, decisions))
        result = paired_coarse(look, SLOWDOWN, step, level, log=True).intervals
        # no variation at all is no interval (INCONCLUSIVE), as in ``estimate_contrast``
        spread = np.where(result.se > 0, 0.0, np.nan)
        # two wild blocks at a strict look reach past exp's range: their bound is inf, as it is
        with np.errstate(over="ignore"):
            lo = (np.exp(result.lo + spread) - 1.0) * 100.0
            hi = (np.exp(result.hi + spread) - 1.0) * 100.0
        overall = classify(lo, hi, margin_pct).max(axis=1)
        final = np.asarray(np.where(undecided, overall, final), dtype=np.float64)
        stops = undecided & (overall != 1)
        spent = np.asarray(np.where(stops, float(blocks), spent), dtype=np.float64)
        undecided &= overall == 1
    return final, spent
