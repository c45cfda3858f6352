"""One simulated round, every metric and size from the same history round (issue 46).

Why. The regression gate's verdict is the worst of its decisions (size x metric), so how often
it FAILs or PASSes depends on how the decisions move together: batch_ready_s and p95_s of one
batch are one measurement seen twice (the lab's correlate at about 0.7). Drawn independently,
a plan FAILs a candidate twice the margin slower far more often than the gate does (two nearly
independent chances instead of one and a bit): 10-22 points over, measured. So every decision's
draws of a simulated round are made from the same history round:

- the block's level: one history block (run, block), the same for every decision;
- the round's own noise on continuous data: one history round (run, block, arm), the same
  for every decision, so its residuals keep their joint shape;
- on rounds that end on ticks (work drawn from a normal): normals correlated as the decisions'
  residuals are over the shared rounds, and, where a model keeps one phase a round, the phase
  of the same history round.

Only rounds every decision has are drawn from (a metric missing from a round drops the round
for all); with fewer than ``MIN_SHARED`` shared rounds the decisions are drawn independently,
as ``round_model.draws`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from abtest.stats.intervals import FloatArray
from abtest.stats.round_model import Draws, IntArray, RoundModel, draws

#: fewer shared history rounds than this and the decisions are drawn independently
MIN_SHARED = 10


def joint_draws(
    models: Sequence[RoundModel], sims: int, blocks: int, seed: int, arms: int = 2
) -> tuple[Draws, ...]:
    """One ``Draws`` per model, every simulated round of each drawn from the same history
    round; independent draws (seeds ``seed + i``) when the models share too few rounds."""
    shared_blocks = _shared([m.block_keys for m in models])
    shared_cells = _shared([m.cell_keys for m in models])
    if len(models) < 2 or min(len(shared_blocks), len(shared_cells)) < MIN_SHARED:
        return tuple(draws(m, sims, blocks, seed + i, arms) for i, m in enumerate(models))
    rng = np.random.default_rng(seed)
    block = rng.integers(0, len(shared_blocks), (sims, blocks))
    cell = rng.integers(0, len(shared_cells), (sims, blocks, arms))
    normal = _correlated_normals(rng, models, shared_cells, (sims, blocks, arms))
    out = []
    for i, m in enumerate(models):
        block_at = _index(m.block_keys, shared_blocks)
        cell_at = _index(m.cell_keys, shared_cells)
        if m.phases.size == len(m.cell_keys):  # one phase a round: that round's
            phase = cell_at[cell]
        else:
            phase = rng.integers(0, max(m.phases.size, 1), (sims, blocks, arms))
        out.append(Draws(block_at[block], cell_at[cell], normal[..., i], phase))
    return tuple(out)


def _shared(keys: Sequence[tuple[str, ...]]) -> list[str]:
    """The keys every model has, in the first model's order (deterministic draws)."""
    common = set(keys[0]).intersection(*keys[1:])
    return [k for k in dict.fromkeys(keys[0]) if k in common]


def _index(keys: tuple[str, ...], shared: list[str]) -> IntArray:
    """Each shared key's position in ``keys`` (a round repeated in a history: its first)."""
    where: dict[str, int] = {}
    for i, k in enumerate(keys):
        where.setdefault(k, i)
    return np.array([where[k] for k in shared], dtype=np.int64)


def _correlated_normals(
    rng: np.random.Generator,
    models: Sequence[RoundModel],
    shared_cells: list[str],
    shape: tuple[int, int, int],
) -> FloatArray:
    """Standard normals shaped ``shape + (decisions,)``, correlated across decisions as
    their residuals are over the shared rounds (on a grid the residuals are rounded: their
    correlation is a little lower than the work's, so the plan errs towards independence)."""
    resid = np.stack([m.residuals[_index(m.cell_keys, shared_cells)] for m in models])
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.corrcoef(resid)
    corr = np.where(np.isfinite(corr), corr, 0.0)
    np.fill_diagonal(corr, 1.0)
    # nearest positive semi-definite matrix: estimated correlations need not be one
    values, vectors = np.linalg.eigh(corr)
    root = vectors * np.sqrt(np.clip(values, 0.0, None))
    z = rng.standard_normal((*shape, len(models)))
    return np.asarray(z @ root.T, dtype=np.float64)
