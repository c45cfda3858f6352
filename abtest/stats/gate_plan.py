"""Planning the regression gate for both outcomes (issue 37 §1): before anything runs, how often
an unchanged candidate PASSes and how often a clearly slower one FAILs, with the gate's looks.

Why a simulation. The gate's verdict is the worst of several decisions over several looks with
Bonferroni-spent intervals; its PASS rate has no closed form. So the plan simulates the gate
(``gate_codes``, the very rule the gate runs) on per-block log ratios that are normal with the
node's paired SD (``abtest.stats.power``'s noise from history, or its stated default), the
decisions independent (the lowest PASS rate for a given noise: correlated metrics PASS
together more often, so the plan errs on the safe side).

The two outcomes. At the margin itself a FAIL is by design at most alpha / 2 (that is the wrong
FAIL the gate promises not to make), so "a candidate at the margin FAILs" is planned as its
mirror image: a candidate slower by twice the margin, which is as far above the margin as an
unchanged one is below it. Both rates come out alike; the plan prints both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from abtest.stats.gate_sim import gate_outcome
from abtest.stats.intervals import FloatArray

TARGET = 0.80
SIMULATIONS = 4_000
#: caps the plan tries when the asked one cannot reach the target: up to this many blocks
LARGEST_CAP = 200
#: the searches for a cap or a margin that would reach the target use this many of the
#: simulations (a suggestion to +-1.5 points is enough; the rates printed use all of them)
SEARCH_SIMULATIONS = 1_000


@dataclass(frozen=True)
class GatePlan:
    looks: tuple[int, ...]
    margin_pct: float
    confidence: float
    sd_log_diffs: tuple[float, ...]  # one per decision (size x metric)
    pass_if_unchanged: float
    fail_if_twice_margin: float
    expected_blocks_unchanged: float  # blocks measured on average when nothing changed
    target: float
    cap_that_would: int | None  # the smallest cap (same first look) reaching the target
    margin_that_would: float | None  # the smallest margin reaching it with this cap

    @property
    def reaches(self) -> bool:
        return self.pass_if_unchanged >= self.target and self.fail_if_twice_margin >= self.target


def look_blocks(first: int, cap: int) -> tuple[int, ...]:
    """The gate's looks (``abtest.engine.gate_rounds.look_schedule``, restated: stats imports
    no engine): first, 2 x first, ... capped at cap."""
    looks = [first * k for k in range(1, math.ceil(cap / first) + 1)]
    looks[-1] = min(looks[-1], cap)
    return tuple(sorted(set(looks)))


def _rates(
    normals: FloatArray,
    sds: Sequence[float],
    looks: Sequence[int],
    confidence: float,
    margin_pct: float,
) -> tuple[float, float, float]:
    """(P(PASS | unchanged), P(FAIL | 2 x margin), mean blocks when unchanged)."""
    noise = normals[:, : len(sds), : looks[-1]] * np.asarray(sds)[None, :, None]
    out = []
    for truth, wanted in ((0.0, 0), (math.log1p(2.0 * margin_pct / 100.0), 2)):
        ratios = np.exp(truth + noise)
        cells = np.stack([np.ones_like(ratios), ratios], axis=-1)
        codes, spent = gate_outcome(cells, looks, confidence, margin_pct, False)
        out.append((float(np.mean(codes == wanted)), float(spent.mean())))
    return out[0][0], out[1][0], out[0][1]


def plan_gate(
    sd_log_diffs: Sequence[float],
    *,
    first_look: int,
    cap: int,
    margin_pct: float,
    confidence: float,
    target: float = TARGET,
    simulations: int = SIMULATIONS,
    seed: int = 37,
    search: bool = True,
) -> GatePlan:
    """The gate's two rates for these noises and looks, and, when they fall short of
    ``target`` (and ``search``), the cap and the margin that would reach it."""
    largest = max(cap, LARGEST_CAP)
    rng = np.random.default_rng(seed)
    normals = rng.standard_normal((simulations, len(sd_log_diffs), largest))
    looks = look_blocks(first_look, cap)
    passed, failed, spent = _rates(normals, sd_log_diffs, looks, confidence, margin_pct)
    cap_would = margin_would = None
    if search and min(passed, failed) < target:
        few = normals[:SEARCH_SIMULATIONS]
        cap_would = _cap_that_would(
            few, sd_log_diffs, first_look, cap, largest, confidence, margin_pct, target
        )
        margin_would = _margin_that_would(few, sd_log_diffs, looks, confidence, target)
    return GatePlan(
        looks, margin_pct, confidence, tuple(sd_log_diffs), passed, failed, spent, target,
        cap_would, margin_would,
    )  # fmt: skip


def _reaches(
    normals: FloatArray,
    sds: Sequence[float],
    looks: Sequence[int],
    confidence: float,
    margin: float,
    target: float,
) -> bool:
    passed, failed, _ = _rates(normals, sds, looks, confidence, margin)
    return min(passed, failed) >= target


def _cap_that_would(
    normals: FloatArray,
    sds: Sequence[float],
    first: int,
    cap: int,
    largest: int,
    confidence: float,
    margin: float,
    target: float,
) -> int | None:
    """The smallest multiple of the first look above ``cap`` that reaches the target
    (bisection: the rates grow with the cap)."""
    lo, hi = cap // first, largest // first  # in looks; invariant: lo short, hi unknown
    if not _reaches(normals, sds, look_blocks(first, hi * first), confidence, margin, target):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _reaches(normals, sds, look_blocks(first, mid * first), confidence, margin, target):
            hi = mid
        else:
            lo = mid
    return hi * first


def _margin_that_would(
    normals: FloatArray,
    sds: Sequence[float],
    looks: Sequence[int],
    confidence: float,
    target: float,
) -> float | None:
    """The smallest margin (to the half percent, upwards) this cap reaches the target with."""
    lo, hi = 0.0, 50.0
    if not _reaches(normals, sds, looks, confidence, hi, target):
        return None
    while hi - lo > 0.25:
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if _reaches(normals, sds, looks, confidence, mid, target) else (mid, hi)
    return math.ceil(hi * 2.0) / 2.0
