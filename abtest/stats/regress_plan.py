"""Planning the regression gate for both outcomes (issue 37 §1): before anything runs, how often
an unchanged candidate PASSes and how often a clearly slower one FAILs, with the gate's looks.

Why a simulation. The gate's verdict is the worst of several decisions over several looks with
Bonferroni-spent intervals; its PASS rate has no closed form. So the plan simulates the gate
(``regress_codes``, the very rule the gate runs) on per-block log ratios that are normal with the
node's paired SD (``abtest.stats.power``'s noise from history, or its stated default), the
decisions independent, or from the node's own rounds, every decision of a simulated round from
the same history round (``abtest.stats.joint_rounds``): the gate's verdict is the worst of its
decisions, so their correlation decides both rates, and independent decisions planned the FAIL
rate at twice the margin 10-22 points high where two metrics correlate at 0.7 (issue 46).

The two outcomes. At the margin itself a FAIL is by design at most alpha / 2 (that is the wrong
FAIL the gate promises not to make), so "a candidate at the margin FAILs" is planned as its
mirror image: a candidate slower by twice the margin, which is as far above the margin as an
unchanged one is below it. Both rates come out alike; the plan prints both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from abtest.stats.intervals import FloatArray
from abtest.stats.joint_rounds import joint_draws
from abtest.stats.plan_interval import LEVEL, RateInterval, no_interval, scaled, sd_factors
from abtest.stats.regress_sim import regress_outcome
from abtest.stats.round_model import Draws, RoundModel, simulate

TARGET = 0.80
SIMULATIONS = 4_000
#: caps the plan tries when the asked one cannot reach the target: up to this many blocks
LARGEST_CAP = 200
#: the same from the node's rounds (each look searches the rounds for a grid, as the gate does:
#: a search to 200 blocks would take the plan past a few seconds)
NODE_LARGEST_CAP = 60
NODE_SEARCH_SIMULATIONS = 500
#: the searches for a cap or a margin that would reach the target use this many of the
#: simulations (a suggestion to +-1.5 points is enough; the rates printed use all of them)
SEARCH_SIMULATIONS = 1_000


@dataclass(frozen=True)
class RegressPlan:
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
    models: tuple[str, ...] = ()  # per decision: "this node's N rounds ..." or "normal model"
    interval: RateInterval | None = None  # how sure the plan is of the two rates (issue 46)

    @property
    def from_rounds(self) -> bool:
        return any(m != "normal model" for m in self.models)

    @property
    def reaches(self) -> bool:
        return self.pass_if_unchanged >= self.target and self.fail_if_twice_margin >= self.target


def look_blocks(first: int, cap: int) -> tuple[int, ...]:
    """The gate's looks (``abtest.engine.regress_rounds.look_schedule``, restated: stats imports
    no engine): first, 2 x first, ... capped at cap."""
    looks = [first * k for k in range(1, math.ceil(cap / first) + 1)]
    looks[-1] = min(looks[-1], cap)
    return tuple(sorted(set(looks)))


#: (truth on the log scale, blocks) -> raw times (sims, decisions, blocks, 2), reference first
CellMaker = Callable[[float, int], FloatArray]


@dataclass(frozen=True)
class _Noise:
    """Where the simulated gates' rounds come from: normal per-block log ratios with each
    decision's SD, or, for a decision with a ``RoundModel``, the node's own rounds."""

    sds: tuple[float, ...]
    models: tuple[RoundModel | None, ...]
    normals: FloatArray  # (sims, decisions, largest)
    node_draws: tuple[Draws | None, ...]
    seed: int = 37  # the draws': the interval's ends redraw the same rounds

    @property
    def on_ticks(self) -> bool:
        """Whether any decision's rounds end on ticks (then the gate's grid search matters)."""
        return any(m is not None and m.tick > 0 for m in self.models)

    def head(self, sims: int) -> CellMaker:
        def cells(truth: float, blocks: int) -> FloatArray:
            out = []
            for i, (sd, model) in enumerate(zip(self.sds, self.models, strict=True)):
                d = self.node_draws[i]
                if model is None or d is None:
                    ratios = np.exp(truth + sd * self.normals[:sims, i, :blocks])
                    out.append(np.stack([np.ones_like(ratios), ratios], axis=-1))
                else:
                    out.append(simulate(model, d, np.array([0.0, truth]), blocks)[:sims])
            return np.stack(out, axis=1)

        return cells


def _noise(
    sds: Sequence[float], models: Sequence[RoundModel | None], sims: int, largest: int, seed: int
) -> _Noise:
    rng = np.random.default_rng(seed)
    normals = rng.standard_normal((sims, len(sds), largest))
    chosen = tuple(models) if models else (None,) * len(sds)
    present = [m for m in chosen if m is not None]
    # every decision of a simulated round from the same history round (issue 46)
    joint = iter(joint_draws(present, sims, largest, seed + 1)) if present else iter(())
    node = tuple(None if m is None else next(joint) for m in chosen)
    return _Noise(tuple(sds), chosen, normals, node, seed)


def _rates(
    cells: CellMaker,
    looks: Sequence[int],
    confidence: float,
    margin_pct: float,
    on_ticks: bool = False,
) -> tuple[float, float, float]:
    """(P(PASS | unchanged), P(FAIL | 2 x margin), mean blocks when unchanged)."""
    out = []
    for truth, wanted in ((0.0, 0), (math.log1p(2.0 * margin_pct / 100.0), 2)):
        codes, spent = regress_outcome(
            cells(truth, looks[-1]), looks, confidence, margin_pct, on_ticks
        )
        out.append((float(np.mean(codes == wanted)), float(spent.mean())))
    return out[0][0], out[1][0], out[0][1]


def simulated_plan(
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
    models: Sequence[RoundModel | None] = (),
    noise_df: int = 0,
) -> RegressPlan:
    """The gate's two rates for these noises and looks, and, when they fall short of
    ``target`` (and ``search``), the cap and the margin that would reach it. A decision with a
    model in ``models`` is simulated from the node's rounds, the others from a normal model.
    ``noise_df``: the degrees of freedom the noises were estimated on (the fewest of them),
    for the rates' interval (``abtest.stats.plan_interval``); 0: a stated default, none."""
    node = any(m is not None for m in models)
    largest = max(cap, NODE_LARGEST_CAP if node else LARGEST_CAP)
    noise = _noise(sd_log_diffs, models, simulations, largest, seed)
    looks = look_blocks(first_look, cap)
    passed, failed, spent = _rates(
        noise.head(simulations), looks, confidence, margin_pct, noise.on_ticks
    )
    cap_would = margin_would = None
    if search and min(passed, failed) < target:
        sims = NODE_SEARCH_SIMULATIONS if node else SEARCH_SIMULATIONS
        few = _Search(noise.head(sims), confidence, target, noise.on_ticks)
        cap_would = _cap_that_would(few, first_look, cap, largest, margin_pct)
        margin_would = _margin_that_would(few, looks)
    sure = _interval(noise, noise_df, looks, confidence, margin_pct)
    return RegressPlan(
        looks, margin_pct, confidence, tuple(sd_log_diffs), passed, failed, spent, target,
        cap_would, margin_would, tuple(m.source if m else "normal model" for m in noise.models),
        sure,
    )  # fmt: skip


def _interval(
    noise: _Noise, df: int, looks: Sequence[int], confidence: float, margin_pct: float
) -> RateInterval:
    """The rates again with the noise at both ends of its interval (the same simulated
    rounds): more noise, fewer decisions, so the noisier end gives both rates' low ends."""
    if df <= 0:
        return no_interval("the noise is the stated default, not measured")
    if noise.on_ticks:
        return no_interval(
            "rounds end on ticks: where the level sits against the tick decides the rates "
            "more than the noise does",
            df,
        )
    sims = noise.normals.shape[0]
    ends = []
    for factor in sd_factors(df):
        models = tuple(None if m is None else scaled(m, factor) for m in noise.models)
        sds = [sd * factor for sd in noise.sds]
        again = _noise(sds, models, sims, noise.normals.shape[2], noise.seed)
        ends.append(_rates(again.head(sims), looks, confidence, margin_pct)[:2])
    (pass_a, fail_a), (pass_b, fail_b) = ends
    return RateInterval(
        LEVEL, df, (min(pass_a, pass_b), max(pass_a, pass_b)),
        (min(fail_a, fail_b), max(fail_a, fail_b)),
    )  # fmt: skip


@dataclass(frozen=True)
class _Search:
    cells: CellMaker
    confidence: float
    target: float
    on_ticks: bool

    def reaches(self, looks: Sequence[int], margin: float) -> bool:
        passed, failed, _ = _rates(self.cells, looks, self.confidence, margin, self.on_ticks)
        return min(passed, failed) >= self.target


def _cap_that_would(
    search: _Search, first: int, cap: int, largest: int, margin: float
) -> int | None:
    """The smallest multiple of the first look above ``cap`` that reaches the target
    (bisection: the rates grow with the cap)."""
    lo, hi = cap // first, largest // first  # in looks; invariant: lo short, hi unknown
    if not search.reaches(look_blocks(first, hi * first), margin):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if search.reaches(look_blocks(first, mid * first), margin):
            hi = mid
        else:
            lo = mid
    return hi * first


def _margin_that_would(search: _Search, looks: Sequence[int]) -> float | None:
    """The smallest margin (to the half percent, upwards) this cap reaches the target with."""
    lo, hi = 0.0, 50.0
    if not search.reaches(looks, hi):
        return None
    while hi - lo > 0.25:
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if search.reaches(looks, mid) else (mid, hi)
    return math.ceil(hi * 2.0) / 2.0
