"""Calibration: nominal 95 % intervals must cover the truth 93-97 % of the time at small n.

Round times are simulated log-normal (skewed) with a known true ratio T/B = 0.8 (a 20 %
reduction), with and without a random per-block multiplier (drift between blocks), at 5, 10 and
20 blocks, 4000 simulated experiments per case. The simulation calls the same vectorised
interval functions ``compare()`` uses (one experiment per row), and a check below shows
``compare()`` returns exactly those intervals for simulated frames. Seeded: deterministic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from abtest.stats import compare, one_sample_t, welch_t
from abtest.stats.intervals import TIntervals

pytestmark = pytest.mark.calibration

SIMULATIONS = 4000
TRUE_RATIO = 0.8
BASE_SECONDS = 4.0
ROUND_NOISE = 0.15  # sd of log round time within a block: ~15 % round-to-round
BLOCK_NOISE = 0.3  # sd of the log block multiplier: large drift between blocks
CONFIDENCE = 0.95
COVERAGE_RANGE = (0.93, 0.97)


def _simulate(
    seed: int, n_blocks: int, block_effects: bool, ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """Log round times (SIMULATIONS x n_blocks) for baseline and treatment, block-aligned."""
    rng = np.random.default_rng(seed)
    shape = (SIMULATIONS, n_blocks)
    block = rng.normal(0.0, BLOCK_NOISE, shape) if block_effects else np.zeros(shape)
    log_base = np.log(BASE_SECONDS) + block + rng.normal(0.0, ROUND_NOISE, shape)
    log_treat = np.log(BASE_SECONDS * ratio) + block + rng.normal(0.0, ROUND_NOISE, shape)
    return log_base, log_treat


def _log_ratio_intervals(log_base: np.ndarray, log_treat: np.ndarray, paired: bool) -> TIntervals:
    if paired:
        return one_sample_t(log_treat - log_base, CONFIDENCE)
    return welch_t(log_treat, log_base, CONFIDENCE)


# (blocks, block effects, analysis). Unpaired Welch is only valid (and only used by compare())
# when rounds carry no block labels, i.e. without block effects to pair away.
CASES = [
    (n, effects, paired)
    for n in (5, 10, 20)
    for effects, paired in ((False, False), (False, True), (True, True))
]


@pytest.mark.parametrize(("n_blocks", "block_effects", "paired"), CASES)
def test_pct_reduction_interval_covers_truth(
    n_blocks: int, block_effects: bool, paired: bool
) -> None:
    log_base, log_treat = _simulate(100 + n_blocks, n_blocks, block_effects, TRUE_RATIO)
    result = _log_ratio_intervals(log_base, log_treat, paired)
    # pct = (1 - ratio) * 100 is monotone in the log ratio: covering log(0.8) on the log scale
    # is exactly covering 20 % on the percent scale.
    pct_lo = (1 - np.exp(result.hi)) * 100
    pct_hi = (1 - np.exp(result.lo)) * 100
    true_pct = (1 - TRUE_RATIO) * 100
    coverage = float(np.mean((pct_lo <= true_pct) & (true_pct <= pct_hi)))
    assert COVERAGE_RANGE[0] <= coverage <= COVERAGE_RANGE[1], coverage


@pytest.mark.parametrize(("n_blocks", "block_effects", "paired"), CASES)
def test_savings_interval_covers_truth(n_blocks: int, block_effects: bool, paired: bool) -> None:
    log_base, log_treat = _simulate(200 + n_blocks, n_blocks, block_effects, TRUE_RATIO)
    base, treat = np.exp(log_base), np.exp(log_treat)
    # E[B - T] for log-normal times: E[B] (1 - ratio), E[B] = base * E[block] * E[noise].
    block_var = BLOCK_NOISE**2 if block_effects else 0.0
    true_savings = BASE_SECONDS * np.exp((block_var + ROUND_NOISE**2) / 2) * (1 - TRUE_RATIO)
    result = one_sample_t(base - treat, CONFIDENCE) if paired else welch_t(base, treat, CONFIDENCE)
    coverage = float(np.mean((result.lo <= true_savings) & (true_savings <= result.hi)))
    assert COVERAGE_RANGE[0] <= coverage <= COVERAGE_RANGE[1], coverage


@pytest.mark.parametrize(("n_blocks", "block_effects", "paired"), CASES)
def test_a_a_is_rarely_significant(n_blocks: int, block_effects: bool, paired: bool) -> None:
    log_base, log_treat = _simulate(300 + n_blocks, n_blocks, block_effects, 1.0)
    result = _log_ratio_intervals(log_base, log_treat, paired)
    false_positive_rate = float(np.mean(result.p_value < 0.05))
    assert false_positive_rate <= 0.065, false_positive_rate


def test_compare_uses_the_simulated_interval_functions() -> None:
    """compare() on simulated frames returns exactly the vectorised intervals above."""
    n_blocks, checked = 5, 25
    for block_effects, paired in ((True, True), (False, False)):
        log_base, log_treat = _simulate(7, n_blocks, block_effects, TRUE_RATIO)
        vectorised = _log_ratio_intervals(log_base, log_treat, paired)
        for row in range(checked):
            frame = pd.DataFrame(
                {
                    "arm": ["baseline"] * n_blocks + ["treat"] * n_blocks,
                    "size": 50,
                    "batch_ready_s": np.exp(np.concatenate([log_base[row], log_treat[row]])),
                }
            )
            if paired:
                frame["block"] = list(range(n_blocks)) * 2
            (result,) = compare(frame, baseline="baseline", metric="batch_ready_s")
            assert result.method == ("paired" if paired else "welch")
            assert result.ratio_ci == pytest.approx(
                (np.exp(vectorised.lo[row]), np.exp(vectorised.hi[row])), rel=1e-9
            )
            assert result.p_value == pytest.approx(vectorised.p_value[row], rel=1e-9)
