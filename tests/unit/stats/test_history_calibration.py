"""Calibration of `abtest history`'s change points (Apache Otava at MAX_PVALUE) by simulation:
nightly-like series of 12 runs, each run 5 rounds of one arm and size with the lab's measured
round-to-round noise (8 %, the figure the regression gate is calibrated with) and a run-to-run
drift of 2 %. Flat series: how often a change point is reported at all (false alarms). Series
with a 5 % and a 10 % slowdown from run 7 on: how often a slower change point is found, and how
far from run 7. Issue 37: false change points per series length (12, 20, 40 runs) at each
max p-value, how often a nightly `--fail-on-new 1` pages on a flat series, and a single odd run
(20/30/50 % slower) last or mid-series: not a change point, no page unless
`--alarm-unconfirmed`. The figures printed here under `scripts/test --calibration` (400 flat
series per length, 300 with an odd run) are the ones in docs/statistics.md; the fast tier
simulates half as many (the bound beside each assertion)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from calibration import draws, slack

from abtest.app.history import earlier_reports, new_alarms
from abtest.stats.changepoints import MAX_PVALUE, RunFigure, change_points, run_figure

pytestmark = pytest.mark.calibration

ROUND_NOISE, RUN_DRIFT, ROUNDS, RUNS, AT, SIMS = 0.08, 0.02, 5, 12, 6, 300


@dataclass(frozen=True)
class Rates:
    flagged: float  # share of series with a (slower, for a step) change point
    exact: float  # ... found at the right run
    within_one: float  # ... within one run of it
    mean_error: float | None  # runs between the nearest one found and the right run


def _series(rng: np.random.Generator, runs: int, odd_at: int | None = None,
            odd: float = 0.0) -> list[RunFigure]:  # fmt: skip
    figures = []
    for i in range(runs):
        level = np.log(5.0) + rng.normal(0, RUN_DRIFT) + (np.log1p(odd) if i == odd_at else 0)
        rounds = np.exp(level + rng.normal(0, ROUND_NOISE, ROUNDS))
        figures.append(run_figure(f"r{i}", "", [float(x) for x in rounds]))
    return figures


FLAT_SIMS = draws(400, 200)
ODD_SIMS = draws(300, 150)


@pytest.mark.parametrize("max_p", [MAX_PVALUE, 0.01])
@pytest.mark.parametrize("runs", [12, 20, 40])
def test_false_change_points_per_series_length(runs: int, max_p: float) -> None:
    rng = np.random.default_rng(runs * 7 + int(max_p * 1000))
    confirmed = unconfirmed = pages = 0
    for _ in range(FLAT_SIMS):
        series = _series(rng, runs)
        found = change_points(series, max_p)
        confirmed += any(c.confirmed for c in found)
        unconfirmed += any(not c.confirmed for c in found)
        earlier = earlier_reports(series, 1, max_p, 0.95)  # the nights before's reports
        pages += bool(new_alarms(found, runs, 1, earlier=earlier))
    rates = [x / FLAT_SIMS for x in (confirmed, unconfirmed, pages)]
    print(f"flat {runs} runs, max p {max_p}: confirmed {rates[0]:.1%}, unconfirmed "
          f"{rates[1]:.1%}, a nightly --fail-on-new 1 pages {rates[2]:.1%}")  # fmt: skip
    limit = 0.04 if max_p == MAX_PVALUE else 0.30
    # full size measured confirmed 1.5-2.2 % (default) and 9.2-19.8 % (0.01), pages <= 1.5 %;
    # at 200 series a true 4 % lands within +-4.2 pts, 30 % within +-9.7, 2 % within +-3.0
    # (3 sigma), which the fast tier allows past the limits
    assert rates[0] <= limit + slack(limit, FLAT_SIMS)
    assert rates[2] <= 0.02 + slack(0.02, FLAT_SIMS)


ODD = [(odd, at) for odd in (0.2, 0.3, 0.5) for at in ("last", "mid")]


@pytest.mark.parametrize(("odd", "at"), ODD)
def test_one_odd_run_is_no_change_point_and_pages_only_when_asked(odd: float, at: str) -> None:
    rng = np.random.default_rng(int(odd * 100) + len(at))
    sims, runs = ODD_SIMS, RUNS
    confirmed = pages = asked = 0
    for _ in range(sims):
        series = _series(rng, runs, runs - 1 if at == "last" else runs // 2, odd)
        found = change_points(series)
        earlier = earlier_reports(series, 1, MAX_PVALUE, 0.95)  # the nights before's reports
        confirmed += any(c.confirmed for c in found)
        pages += bool(new_alarms(found, runs, 1, earlier=earlier))
        asked += bool(new_alarms(found, runs, 1, unconfirmed=True, earlier=earlier))
    rates = [x / sims for x in (confirmed, pages, asked)]
    print(f"one run {odd:.0%} slower ({at}): confirmed change point {rates[0]:.1%}, pages "
          f"{rates[1]:.1%}, with --alarm-unconfirmed {rates[2]:.1%}")  # fmt: skip
    # no more than a flat series gives (its false rate at the default is <= 4 %); measured
    # <= 2.0 % confirmed, 0.0 % pages; at 150 series a true 4 % lands within +-4.8 pts and 2 %
    # within +-3.4 (3 sigma), which the fast tier allows past the limits
    assert rates[0] <= 0.04 + slack(0.04, sims) and rates[1] <= 0.02 + slack(0.02, sims)
    if at == "mid":
        assert rates[2] <= 0.02 + slack(0.02, sims)


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
