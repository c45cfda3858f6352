"""Calibration of planning by power by simulation (issue 15 section 3), as for the intervals.

A true change equal to the minimum detectable effect must be detected (the interval the report
prints excludes 0) about 80 % of the time. Detection uses ``one_sample_t`` on per-block log
ratios, the very code ``compare`` runs for a paired comparison; block drift is in the simulated
times and cancels only through the pairing, as on a node.

Two levels: the MDE arithmetic with the true noise (does the noncentral t give 80 %?), and the
whole plan as a user runs it: noise estimated from a simulated node history (several earlier
runs with arm effects and drift), MDE from that estimate, then fresh experiments at the MDE.
Seeded, vectorised, a few seconds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from abtest.stats.intervals import one_sample_t
from abtest.stats.power import blocks_needed, detectable, noise_from_history

pytestmark = pytest.mark.calibration

CONFIDENCE = 0.95


def _detection_rate(
    rng: np.random.Generator, effect_log: float, sd_diff: float, n: int, sims: int
) -> float:
    """Share of simulated paired experiments whose interval excludes 0."""
    sd_round = sd_diff / math.sqrt(2.0)  # each arm's own round noise on the log scale
    drift = rng.normal(0.0, 0.3, (sims, n))  # slow and fast blocks, shared by both arms
    log_b = 1.0 + drift + rng.normal(0.0, sd_round, (sims, n))
    log_t = 1.0 + drift + effect_log + rng.normal(0.0, sd_round, (sims, n))
    # the rounds are times; compare() takes their logs
    ratios = np.log(np.exp(log_t)) - np.log(np.exp(log_b))
    result = one_sample_t(ratios, CONFIDENCE)
    return float(np.mean((result.lo > 0) | (result.hi < 0)))


@pytest.mark.parametrize("n", [3, 5, 10, 20])
@pytest.mark.parametrize("sd_diff", [0.05, 0.15])
def test_a_change_equal_to_the_mde_is_detected_80_percent_of_the_time(
    n: int, sd_diff: float
) -> None:
    rng = np.random.default_rng(1000 * n + int(sd_diff * 100))
    found = detectable(sd_diff, n, CONFIDENCE)
    slowdown = math.log1p(found.mde_pct / 100.0)  # a slowdown of exactly MDE %
    rate = _detection_rate(rng, slowdown, sd_diff, n, 20_000)
    assert 0.78 <= rate <= 0.82, rate
    # a reduction of MDE % is a larger change on the log scale: detected at least as often
    reduction = math.log1p(-found.mde_pct / 100.0)
    assert _detection_rate(rng, reduction, sd_diff, n, 20_000) >= 0.80
    # and half the MDE is clearly underpowered (the number is not vacuous)
    assert _detection_rate(rng, slowdown / 2, sd_diff, n, 20_000) < 0.5


def test_blocks_needed_for_a_target_reach_80_percent() -> None:
    rng = np.random.default_rng(7)
    for sd_diff, pct in ((0.08, 10.0), (0.12, 30.0), (0.04, 5.0)):
        n = blocks_needed(sd_diff, pct, CONFIDENCE)
        assert n is not None
        effect = math.log1p(pct / 100.0)
        assert _detection_rate(rng, effect, sd_diff, n, 20_000) >= 0.78
        if n > 2:
            assert _detection_rate(rng, effect, sd_diff, n - 1, 20_000) < 0.82


def _node_history(rng: np.random.Generator, sd_diff: float) -> pd.DataFrame:
    """Three earlier 5-block runs of 5 arms on one node: real arm effects, drift, noise."""
    sd_round = sd_diff / math.sqrt(2.0)
    runs, blocks, arms = 3, 5, 5
    effects = rng.normal(0.0, 0.3, (runs, 1, arms))
    drift = rng.normal(0.0, 0.3, (runs, blocks, 1))
    logs = 1.5 + effects + drift + rng.normal(0.0, sd_round, (runs, blocks, arms))
    r, b, a = np.meshgrid(range(runs), range(blocks), range(arms), indexing="ij")
    return pd.DataFrame(
        {
            "group": [f"run{x}" for x in r.ravel()],
            "block": b.ravel(),
            "arm": [f"arm{x}" for x in a.ravel()],
            "size": 20,
            "batch_ready_s": np.exp(logs.ravel()),
        }
    )


@pytest.mark.parametrize("n", [5, 10])
def test_the_plan_from_estimated_history_detects_its_mde_about_80_percent(n: int) -> None:
    """MDE planned from noise estimated on a simulated history (df 48), checked on fresh runs:
    the realised detection rate, averaged over histories, is 75-85 %."""
    rng = np.random.default_rng(20251130 + n)
    true_sd = 0.10
    rates, estimates = [], []
    for _ in range(300):
        noise = noise_from_history(_node_history(rng, true_sd), metric="batch_ready_s", size=20)
        assert noise.df == 3 * 4 * 4
        estimates.append(noise.sd_log_diff)
        planned = detectable(noise.sd_log_diff, n, CONFIDENCE)
        effect = math.log1p(planned.mde_pct / 100.0)
        rates.append(_detection_rate(rng, effect, true_sd, n, 200))
    assert np.mean(estimates) == pytest.approx(true_sd, rel=0.05)
    assert 0.75 <= float(np.mean(rates)) <= 0.85, np.mean(rates)
