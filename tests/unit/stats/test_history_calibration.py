"""Calibration of `abtest history`'s change points (Apache Otava at MAX_PVALUE) by simulation:
nightly-like series of 12 runs, each run 5 rounds of one arm and size with the lab's measured
round-to-round noise (8 %, the figure the regression gate is calibrated with) and a run-to-run
drift of 2 %. Flat series: how often a change point is reported at all (false alarms). Series
with a 5 % and a 10 % slowdown from run 7 on: how often a slower change point is found, and how
far from run 7. The figures printed here are the ones in docs/statistics.md."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from abtest.stats.changepoints import MAX_PVALUE, change_points, run_figure

ROUND_NOISE, RUN_DRIFT, ROUNDS, RUNS, AT, SIMS = 0.08, 0.02, 5, 12, 6, 300


@dataclass(frozen=True)
class Rates:
    flagged: float  # share of series with a (slower, for a step) change point
    exact: float  # ... found at the right run
    within_one: float  # ... within one run of it
    mean_error: float | None  # runs between the nearest one found and the right run


def simulate(step: float, seed: int, sims: int = SIMS) -> Rates:
    rng = np.random.default_rng(seed)
    flagged = exact = near = 0
    errors = []
    for _ in range(sims):
        figures = []
        for i in range(RUNS):
            level = np.log(5.0) + rng.normal(0, RUN_DRIFT) + (np.log1p(step) if i >= AT else 0)
            rounds = np.exp(level + rng.normal(0, ROUND_NOISE, ROUNDS))
            figures.append(run_figure(f"r{i}", "", [float(x) for x in rounds]))
        found = change_points(figures, MAX_PVALUE)
        if step:
            found = [c for c in found if c.slower]
        if not found:
            continue
        flagged += 1
        error = min(abs(c.index - AT) for c in found)
        errors.append(error)
        exact += error == 0
        near += error <= 1
    return Rates(flagged / sims, exact / sims, near / sims,
                 float(np.mean(errors)) if errors else None)  # fmt: skip


def test_flat_series_rarely_raise_a_false_change_point() -> None:
    r = simulate(0.0, seed=11)
    print(f"flat: false change point in {r.flagged:.1%} of {SIMS} series")
    assert r.flagged <= 0.08  # a nightly gate that pages on it must not cry wolf


def test_a_10_percent_step_is_found_mostly_at_its_run() -> None:
    r = simulate(0.10, seed=12)
    print(f"10 %: found {r.flagged:.1%}, at the run {r.exact:.1%}, within one {r.within_one:.1%}, "
          f"mean error {r.mean_error:.2f} runs")  # fmt: skip
    assert r.flagged >= 0.40 and r.within_one >= 0.35
    assert r.mean_error is not None and r.mean_error <= 1.0


def test_a_5_percent_step_is_found_less_often_never_more_than_a_10_percent_one() -> None:
    small, big = simulate(0.05, seed=13), simulate(0.10, seed=13)
    print(f"5 %: found {small.flagged:.1%}, at the run {small.exact:.1%}, within one "
          f"{small.within_one:.1%}, mean error {small.mean_error} runs")  # fmt: skip
    assert 0.03 <= small.flagged < big.flagged
