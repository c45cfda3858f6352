"""Simulated round times the way coarse lab data come (issue 37), vectorized for calibration.

Each round's true time is log-normal around ``base`` seconds: a block effect (drift, shared by
the arms of one block) and the round's own noise; the candidate (arm 1) is ``truth_pct`` slower.
Then the time is observed as one of:

- ``"exact"``: as is;
- ``"whole"``: rounded to whole seconds (kube-burner's latencies);
- ``"relist"``: the work plus a wait to the next 1 s tick, the batch starting at a random phase
  of the tick (a batch dominated by the 1 s relist: continuous, but not normal);
- ``"tick"``: the same with the batch starting on a tick (whole seconds, rounded up).

Shape (simulations, decisions, blocks, 2): decisions are metrics correlated by ``rho``.
"""

from __future__ import annotations

import numpy as np

from abtest.stats.intervals import FloatArray

MODES = ("exact", "whole", "relist", "tick")


def rounds(
    rng: np.random.Generator,
    *,
    sims: int,
    blocks: int,
    truth_pct: float | list[float],
    decisions: int = 1,
    base: float = 5.5,
    noise: float = 0.08,
    drift: float = 0.05,
    rho: float = 0.7,
    mode: str = "whole",
) -> FloatArray:
    truths = np.broadcast_to(np.asarray(truth_pct, dtype=np.float64), (decisions,))
    block = rng.normal(0.0, drift, (sims, 1, blocks, 1))
    common = rng.normal(size=(sims, 1, blocks, 2))
    own = rng.normal(size=(sims, decisions, blocks, 2))
    logs = np.log(base) + block + noise * (np.sqrt(rho) * common + np.sqrt(1 - rho) * own)
    logs[..., 1] += np.log1p(truths / 100.0)[None, :, None]
    work: FloatArray = np.exp(logs)
    if mode == "exact":
        return work
    if mode == "whole":
        return np.asarray(np.maximum(np.round(work), 1.0), dtype=np.float64)
    if mode == "tick":
        return np.asarray(np.ceil(work), dtype=np.float64)
    if mode == "relist":
        phase = rng.uniform(size=work.shape)
        return np.asarray(np.ceil(work + phase) - phase, dtype=np.float64)
    raise ValueError(mode)
