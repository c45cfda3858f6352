"""Calibration of the fleet node x arm interaction when nodes differ in noise and in blocks.

Vectorised: thousands of simulated fleets go through ``stats.fleet.welch_nodes``, the very
function ``node_interaction`` computes one fleet with (the per-block log ratios are simulated
directly: block effects cancel within a block, see ``stats.fleet``). Under the null every node
has the same effect, so each contrast's true difference is 0 and "nodes differ" (the
heterogeneity test at 5 %) is a false positive. The figures are written in docs/statistics.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from abtest.stats.fleet import welch_nodes

pytestmark = pytest.mark.calibration

SIMS = 20_000


def _simulate(
    blocks: tuple[int, ...], sds: tuple[float, ...], seed: int
) -> tuple[float, list[float]]:
    """(false "differs" rate, coverage of each node-vs-rest interval) under the null."""
    rng = np.random.default_rng(seed)
    shift = -0.2  # the arm's true effect, the same on every node
    means, variances = [], []
    for n, sd in zip(blocks, sds, strict=True):
        d = shift + rng.normal(0.0, sd, size=(SIMS, n))
        means.append(d.mean(axis=1))
        variances.append(d.var(axis=1, ddof=1))
    got = welch_nodes(np.stack(means, 1), np.stack(variances, 1), np.array(blocks), 0.95)
    coverage = ((got.lo <= 0.0) & (got.hi >= 0.0)).mean(axis=0)
    return float((got.p_value < 0.05).mean()), [float(c) for c in coverage]


@pytest.mark.parametrize(
    ("blocks", "sds"),
    [
        ((5, 5), (0.40, 0.08)),  # two nodes, one 5x noisier
        ((5, 5, 5), (0.40, 0.08, 0.08)),  # three nodes, one 5x noisier
        ((5, 5, 5, 5), (0.40, 0.08, 0.08, 0.08)),  # four nodes, one 5x noisier
        ((3, 8), (0.40, 0.08)),  # the noisy node has 3 blocks, the quiet one 8
        ((3, 8), (0.08, 0.40)),  # the quiet node has 3 blocks, the noisy one 8
        ((3, 8), (0.08, 0.08)),  # equal noise, unequal blocks
        ((3, 8, 8), (0.40, 0.08, 0.08)),
        ((5, 5), (0.08, 0.08)),  # the equal-noise case the pooled method was made for
    ],
)
def test_fleet_interaction_is_calibrated_under_unequal_noise_and_blocks(
    blocks: tuple[int, ...], sds: tuple[float, ...]
) -> None:
    false_differs, coverage = _simulate(blocks, sds, seed=sum(blocks) * 31 + len(blocks))
    assert false_differs <= 0.05, (blocks, sds, false_differs)
    for node, c in enumerate(coverage):
        assert 0.93 <= c <= 0.97, (blocks, sds, node, c)


def test_two_block_nodes_are_conservative_not_overconfident() -> None:
    """A node's variance from 2 blocks has 1 df: the interval is wide, never too narrow."""
    false_differs, coverage = _simulate((2, 2), (0.08, 0.08), seed=7)
    assert false_differs <= 0.05 and min(coverage) >= 0.95
    false_differs, coverage = _simulate((2, 2), (0.40, 0.08), seed=8)
    assert false_differs <= 0.05 and min(coverage) >= 0.95
