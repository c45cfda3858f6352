"""A node's rounds as a simulation draws them (issue 37 §4): the plan's noise, not a formula's.

Why. A normal model of the per-block log ratio (the noncentral t of ``abtest.stats.power``)
over-promises on the lab's data. Two reasons, both about what the analysis really does:

- on a grid (whole seconds; a batch that ends on a 1 s tick) an effect moves the *work* and the
  rounds then land on ticks, so a 10 % change of a 3 s batch may move no round at all, and the
  analysis floors the SD at the rounding's or refuses (``abtest.stats.resolution``). Resampling
  the observed per-block log ratios and adding the effect (a naive bootstrap) plans neither: it
  promised 0.86 where the analysis detected 0.43;
- the per-block ratios are not normal (relist-shaped rounds are the work plus a wait).

So a simulated round is built the way the data are made, from the node's own history:

- its block's level: the mean log of one observed history block (drift, and where a block sits
  against the grid, come with it);
- the round's own noise around it: on continuous data, a draw from the pooled two-way
  residuals of ``log(metric) ~ block + arm`` of the node's runs, scaled to a round's SD (the
  shape of the node's noise kept: skew, a relist's wait); on a grid, a normal work noise whose
  SD is chosen so that the *rounded* rounds vary as much as the observed ones (the work's own
  spread, unseen under the grid; the rounding's share taken out);
- the candidate's effect multiplies the work, and only then does the round wait for its next
  tick, on the grid the data show (``grid_step``: the step, and each round's phase against it).

Pure and deterministic: the random draws are made once (``draws``) and reused for every effect
and block count (common random numbers), so power grows smoothly with both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from abtest.stats.intervals import FloatArray
from abtest.stats.power import run_tables
from abtest.stats.resolution import grid_step

IntArray = NDArray[np.int64]

#: fewer rounds than this (or residual degrees of freedom) and the plan uses the normal model
MIN_ROUNDS = 20
MIN_DF = 10
_MATCH_ROUNDS = 64  # simulated rounds per history block when matching the work's SD
_ON_TICK = 1e-9  # a work ending exactly on a tick (binary fractions) waits for no further one


@dataclass(frozen=True)
class RoundModel:
    """One metric at one size on one node, for simulating experiments."""

    metric: str
    size: int
    levels: FloatArray  # log level of each history block's baseline work (the wait taken out)
    residuals: FloatArray  # pooled residuals, each with a round's SD (continuous data)
    round_sd: float  # the observed SD of a round's log around its block and arm
    work_sd: float  # the SD of a round's log work under the grid (== round_sd when continuous)
    tick: float  # the rounds end on ticks this far apart (s), 0 when continuous
    phases: FloatArray  # where a round starts against the tick (observed), one draw a round
    n_rounds: int
    n_runs: int
    whose: str = "this node's"  # whose rounds they are, for the plan's wording
    #: which history round each level and each residual (and phase, when one a round) is,
    #: (run, block) and (run, block, arm) joined by a unit separator: a plan draws every
    #: metric and size of a simulated round from one history round (``stats.joint_rounds``)
    block_keys: tuple[str, ...] = ()
    cell_keys: tuple[str, ...] = ()
    df: int = 0  # residual degrees of freedom of ``round_sd`` (the plan's interval, issue 46)

    @property
    def source(self) -> str:
        grid = f", ending on {self.tick:g} s ticks" if self.tick > 0 else ""
        return f"{self.whose} {self.n_rounds} rounds in {self.n_runs} run(s){grid}"


@dataclass(frozen=True)
class Draws:
    """The random numbers of ``sims`` simulated experiments of up to ``blocks`` blocks and
    ``arms`` arms, drawn once: block picks, residual picks and normals per round."""

    block: IntArray  # (sims, blocks) indices into levels
    resid: IntArray  # (sims, blocks, arms) indices into residuals
    normal: FloatArray  # (sims, blocks, arms)
    phase: IntArray  # (sims, blocks, arms) indices into phases


def round_model(
    history: pd.DataFrame,
    *,
    metric: str,
    size: int,
    whose: str = "this node's",
    level_arms: tuple[str, ...] = ("baseline",),
) -> RoundModel | None:
    """The model of ``metric`` at ``size`` from the node's earlier runs (the frame
    ``noise_from_history`` takes); None with fewer than ``MIN_ROUNDS`` paired rounds or
    ``MIN_DF`` residual degrees of freedom (then plan with the normal model, and say so).

    A block's level is that of the first of ``level_arms`` the run has (the baseline or the
    reference: the arm a comparison is made against; on ticks where a level sits decides
    much), else the mean of its arms."""
    named_tables = run_tables(history, metric=metric, size=size)
    tables = [t for _, t in named_tables]
    n_rounds = sum(t.size for t in tables)
    df = sum((t.shape[0] - 1) * (t.shape[1] - 1) for t in tables)
    if n_rounds < MIN_ROUNDS or df < MIN_DF:
        return None
    levels, residuals, ss = [], [], 0.0
    for _, table in named_tables:
        logs = np.log(table.to_numpy(dtype=np.float64))
        b, a = logs.shape
        arm_effect = logs.mean(axis=0) - logs.mean()
        resid = logs - logs.mean(axis=1, keepdims=True) - arm_effect
        ss += float((resid**2).sum())
        # a cell's residual has variance sd^2 (a-1)(b-1)/(ab): scaled back to a round's
        residuals.append((resid * math.sqrt(a * b / ((a - 1) * (b - 1)))).ravel())
        named = [list(table.columns).index(n) for n in level_arms if n in table.columns]
        shift = float(arm_effect[named[0]]) if named else 0.0
        levels.append(logs.mean(axis=1) + shift)
    tick, phases = find_ticks(
        np.concatenate([t.to_numpy(dtype=np.float64).ravel() for t in tables])
    )
    round_sd = math.sqrt(ss / df)
    level_arr = np.concatenate(levels)
    shift, work_sd = _fit_work(level_arr, round_sd, tick, phases) if tick > 0 else (0.0, round_sd)
    level_arr = level_arr + shift
    block_keys, cell_keys = _keys(named_tables)
    return RoundModel(
        metric, size, level_arr, np.concatenate(residuals), round_sd, work_sd, tick, phases,
        n_rounds, len(tables), whose, block_keys, cell_keys, df,
    )  # fmt: skip


def _keys(named: list[tuple[str, pd.DataFrame]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The history round of each level (run, block) and residual (run, block, arm), in the
    order ``round_model`` lays them out (a table's cells row by row)."""
    blocks = [f"{run}\x1f{b}" for run, t in named for b in t.index]
    cells = [f"{run}\x1f{b}\x1f{a}" for run, t in named for b in t.index for a in t.columns]
    return tuple(blocks), tuple(cells)


def find_ticks(values: ArrayLike) -> tuple[float, FloatArray]:
    """(tick, observed phases) of rounds that end on ticks, (0, []) for continuous ones: the
    grid the analysis finds (``grid_step``: whole seconds, tick-aligned batches, and those
    with a watch's milliseconds of jitter). On an exact grid the one phase is its offset; near
    one, each round's own (the jitter kept). Rounds that start at a random phase of the tick
    look continuous, to the analysis too, and are taken as such."""
    v = np.asarray(values, dtype=np.float64)
    step = float(grid_step(v))
    if step <= 0:
        return 0.0, np.zeros(0)
    shifted = (v - v.min()) / step
    if np.allclose(shifted, np.round(shifted), rtol=0.0, atol=1e-6):
        return step, np.array([-v.min() % step], dtype=np.float64)
    return step, np.asarray(-v % step, dtype=np.float64)


def draws(model: RoundModel, sims: int, blocks: int, seed: int, arms: int = 2) -> Draws:
    rng = np.random.default_rng(seed)
    return Draws(
        rng.integers(0, model.levels.size, (sims, blocks)),
        rng.integers(0, model.residuals.size, (sims, blocks, arms)),
        rng.standard_normal((sims, blocks, arms)),
        rng.integers(0, max(model.phases.size, 1), (sims, blocks, arms)),
    )


def simulate(model: RoundModel, d: Draws, effects_log: FloatArray, blocks: int) -> FloatArray:
    """Raw round times shaped (sims, blocks, arms): arm ``a``'s work is ``exp(effects_log[a])``
    times the reference's level, each round with its own noise, then waits for its next tick."""
    level = model.levels[d.block[:, :blocks]][..., None]
    if model.tick > 0:
        noise = model.work_sd * d.normal[:, :blocks]
    else:
        noise = model.residuals[d.resid[:, :blocks]]
    work = np.exp(level + noise + np.asarray(effects_log)[None, None, :])
    if model.tick <= 0:
        return np.asarray(work, dtype=np.float64)
    return on_ticks(work, model.tick, model.phases[d.phase[:, :blocks]])


def on_ticks(work: FloatArray, tick: float, phase: FloatArray) -> FloatArray:
    """The work plus the wait to its next tick, the round having started ``phase`` after a
    tick: ``ceil((work + phase) / tick) * tick - phase`` (a round lasts at least one tick)."""
    k = np.maximum(np.ceil((work + phase) / tick - _ON_TICK), 1.0)
    return np.asarray(k * tick - phase, dtype=np.float64)


def _fit_work(
    levels: FloatArray, round_sd: float, tick: float, phases: FloatArray
) -> tuple[float, float]:
    """(shift of the log levels, log SD) of the work whose tick-ended rounds have the observed
    block levels and vary around them as much as the observed ones: the wait to the tick is
    taken out of both. Alternating bisections on a fixed set of normals (the mean grows with
    the shift, the spread with the SD).

    Sheppard's correction (observed variance minus tick^2 / 12) is the large-spread limit of
    the SD found; under about a tick of spread it is wrong, which is the lab's case."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((levels.size, _MATCH_ROUNDS))
    phase = phases[rng.integers(0, phases.size, z.shape)]

    def observed(shift: float, sd: float) -> FloatArray:
        return np.log(on_ticks(np.exp(levels[:, None] + shift + sd * z), tick, phase))

    def mean_gap(shift: float, sd: float) -> float:
        return float(observed(shift, sd).mean() - levels.mean())

    def spread_gap(shift: float, sd: float) -> float:
        return float(np.sqrt(observed(shift, sd).var(axis=1, ddof=1).mean()) - round_sd)

    shift, sd = 0.0, round_sd
    for _ in range(3):
        shift = _root(partial(_swap(mean_gap), sd), -1.0, 1.0)
        sd = _root(partial(spread_gap, shift), 0.0, max(4.0 * round_sd, 0.5))
    return shift, sd


def _swap(f: Callable[[float, float], float]) -> Callable[[float, float], float]:
    return lambda a, b: f(b, a)


def _root(gap: Callable[[float], float], lo: float, hi: float) -> float:
    """Where an increasing ``gap`` crosses 0 in [lo, hi] (an end when it does not)."""
    for _ in range(30):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return (lo + hi) / 2.0
