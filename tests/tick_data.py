"""Round times of the lab's small batches, which end on the kubelet's 1 s relist (issue 46).

A batch's work is log-normal around ``base`` seconds (a block effect shared by the arms of a
block, and each round's own noise, the metrics correlated by ``rho``); the candidate (arm 1)
does ``truth_pct`` more work. The batch starts ``phase`` after a tick, drawn uniformly in
``[0, phase_spread)`` per round (0: in step with the relist), ends on the next tick after its
work, and is observed with ``jitter`` seconds of normal noise (the watch's milliseconds):
``ceil(work + phase) - phase + jitter``. ``start_dither`` adds the random start's uniform
0..width wait to that phase (modulo the 1 s tick). At a 2.7 s base and 2-3.5 % noise nearly
every round of both arms is 3.0xx s: the tick hides the work. ``whole=True`` rounds the work
to whole seconds instead (kube-burner's latencies).

Shape (simulations, decisions, blocks, 2), the reference first.
"""

from __future__ import annotations

import numpy as np
from coarse_data import true_work

from abtest.stats.intervals import FloatArray


def ticked(
    rng: np.random.Generator,
    *,
    sims: int,
    blocks: int,
    truth_pct: float | list[float],
    decisions: int = 2,
    base: float = 2.7,
    noise: float = 0.02,
    drift: float = 0.02,
    rho: float = 0.7,
    jitter: float = 0.003,
    phase_spread: float = 0.0,
    whole: bool = False,
    start_dither: float = 0.0,
) -> FloatArray:
    work = true_work(rng, sims=sims, blocks=blocks, truth_pct=truth_pct, decisions=decisions,
                     base=base, noise=noise, drift=drift, rho=rho)  # fmt: skip
    if whole:
        return np.asarray(np.maximum(np.round(work), 1.0), dtype=np.float64)
    phase = rng.uniform(0.0, phase_spread, work.shape) if phase_spread > 0 else 0.0
    if start_dither > 0:  # abtest's random start (abtest.batch.start_phase) on top
        phase = np.mod(phase + rng.uniform(0.0, start_dither, work.shape), 1.0)
    ended = np.maximum(np.ceil(work + phase), 1.0) - phase
    return np.asarray(ended + rng.normal(0.0, jitter, work.shape), dtype=np.float64)
