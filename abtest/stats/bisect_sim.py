"""Whole bisections simulated, vectorized: how often `abtest bisect` names the right build.

Each simulated search runs the rules of :mod:`abtest.stats.bisect` and the regression gate's
own vectorized verdict (:func:`abtest.stats.regress_sim.regress_outcome`) on simulated rounds: the
endpoint confirmation, then each step's middle build against its two ends, looking at the
planned block counts and stopping at the first decided look. Builds from ``culprit`` on are
``step_pct`` slower (``culprit=None``: no step at all). Round times are log-normal around
``base`` seconds with a block effect shared by the arms of a block (``drift``) and the round's
own noise, observed ``"exact"`` or ``"relist"``-shaped (the work plus a wait to the next 1 s
tick, from a random phase: what a batch dominated by the kubelet's 1 s relist looks like).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from abtest.stats import bisect as b
from abtest.stats.intervals import FloatArray
from abtest.stats.regress_sim import regress_outcome


@dataclass(frozen=True)
class Noise:
    base: float = 5.5  # seconds
    noise: float = 0.05  # the round's own log-SD
    drift: float = 0.05  # the block's log-SD, shared by its arms
    mode: str = "exact"  # or "relist"


@dataclass(frozen=True)
class SimResult:
    named: npt.NDArray[
        np.int64
    ]  # the build each search named; -1: none (not confirmed, spread, unresolved)
    confirmed: npt.NDArray[
        np.bool_
    ]  # the endpoint confirmation FAILed (bad slower beyond the margin)
    rounds: FloatArray  # rounds measured per search (confirmation and every step)

    def rate(self, build: int) -> float:
        return float(np.mean(self.named == build))

    def any_named(self) -> float:
        return float(np.mean(self.named >= 0))


def _rounds(rng: np.random.Generator, truth: FloatArray, blocks: int, noise: Noise) -> FloatArray:
    """Round times shaped (sims, blocks, arms) for true log-means ``truth`` (sims, arms)."""
    sims, arms = truth.shape
    block = rng.normal(0.0, noise.drift, (sims, blocks, 1))
    own = rng.normal(0.0, noise.noise, (sims, blocks, arms))
    work: FloatArray = np.exp(np.log(noise.base) + truth[:, None, :] + block + own)
    if noise.mode == "exact":
        return work
    if noise.mode == "relist":
        phase = rng.uniform(size=work.shape)
        return np.asarray(np.ceil(work + phase) - phase, dtype=np.float64)
    raise ValueError(f"unknown mode {noise.mode!r}")


def simulate(
    rng: np.random.Generator,
    *,
    sims: int,
    builds: int,
    culprit: int | None,
    step_pct: float,
    looks: Sequence[int],
    confidence: float = 0.95,
    margin_pct: float = 5.0,
    noise: Noise | None = None,
) -> SimResult:
    """``sims`` bisections of ``builds`` builds (0 good, ``builds - 1`` bad)."""
    noise = noise or Noise()
    shift = np.log1p(step_pct / 100.0)
    level = (
        np.zeros(builds) if culprit is None else np.where(np.arange(builds) >= culprit, shift, 0.0)
    )
    ends = np.broadcast_to(level[[0, builds - 1]], (sims, 2))
    cells = _rounds(rng, np.asarray(ends), looks[-1], noise)
    codes, spent = regress_outcome(cells[:, None, :, :], looks, confidence, margin_pct)
    confirmed = codes == 2
    rounds = spent * 2.0
    low: npt.NDArray[np.int64] = np.zeros(sims, dtype=np.int64)
    high: npt.NDArray[np.int64] = np.full(sims, builds - 1, dtype=np.int64)
    named: npt.NDArray[np.int64] = np.where(confirmed, builds - 1, -1).astype(np.int64)
    active = confirmed & (high - low >= 2)
    while active.any():
        mid = (low + high) // 2
        truth = level[np.stack([low, mid, high], axis=1)]
        cells = _rounds(rng, truth, looks[-1], noise)
        outcome, used = _step(cells, looks, confidence)
        rounds = np.asarray(rounds + np.where(active, used * 3.0, 0.0), dtype=np.float64)
        low = np.where(active & (outcome == b.GOOD), mid, low)
        high = np.where(active & (outcome == b.BAD), mid, high)
        stuck = active & ((outcome == b.SPREAD) | (outcome == b.UNRESOLVED))
        named = np.where(stuck, -1, np.where(active, high, named))
        active = active & ~stuck & (high - low >= 2)
    return SimResult(named, np.asarray(confirmed, dtype=bool), np.asarray(rounds, dtype=np.float64))


def _step(
    cells: FloatArray, looks: Sequence[int], confidence: float
) -> tuple[FloatArray, FloatArray]:
    """Each simulated step's outcome and the blocks it measured (it stops when decided)."""
    sims = cells.shape[0]
    outcome: FloatArray = np.full(sims, float(b.MORE))
    used: FloatArray = np.full(sims, float(looks[-1]))
    for number, blocks in enumerate(looks, start=1):
        look = b.step_look(
            cells[:, :blocks, :],
            look=number,
            max_looks=len(looks),
            confidence=confidence,
        )
        now = (outcome == b.MORE) & (look.outcome != b.MORE)
        outcome = np.where(now, look.outcome, outcome)
        used = np.where(now, float(blocks), used)
    return outcome, used
