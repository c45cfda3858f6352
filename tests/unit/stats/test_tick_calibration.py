"""Calibration on the lab's tick-ended rounds (issue 46): the rows the audit found failing.

A 10-pod batch on the lab takes about 2.7 s of work and ends on the next 1 s relist, so both
arms are observed as 3.0xx s: the per-block ratio is ~1 with milliseconds of jitter, and a
plain t on that jitter is falsely narrow. ``abtest.stats.resolution`` now takes values near one
whole tick as on that tick, counts grid points among the values near the grid only and prefers
the smaller tick; ``abtest.stats.contrast`` finds the resolution over the whole run. Measured
here through the functions ``compare`` and ``regress`` run (``grid_step``, ``paired_coarse``,
``regress_codes``, and ``compare_pair`` / ``decide`` on frames), at 2.7 s and 5.5 s bases
(``tests/tick_data.py``), seeded, 20 000 simulated experiments per case under ``scripts/test
--calibration`` (the figures in docs/statistics.md), fewer in the fast tier (the bound beside
each assertion). Before the change (same seeds, full size):

- every round within milliseconds of one tick (3 ms jitter), ``lab-regression`` looks 3/6/9,
  margin 5 %: wrong PASS 40-94 %, a candidate 10 % slower PASSed 3-18 %; now no PASS (the
  comparison is refused: INCONCLUSIVE, with the reason);
- the same, the 95 % reduction interval at 3 blocks: covered 0-1 % at 2.7 s; now no interval;
- ticks + 10 ms jitter at 8 % noise: wrong PASS up to 1 %, at 2-3.5 % as above;
- whole seconds: comparisons with no interval and no reason (a constant ratio, "no
  variation") now carry the grid's reason and what to do;
- tick-ended rounds at 8 % noise, 6-20 blocks: a 2 s grid chosen (then refused) in 20-59 % of
  2.7 s comparisons; now 1 s in all.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from calibration import draws, sigma3, slack
from live_gate import live_looks
from tick_data import ticked

from abtest.config.playbook import load_playbook
from abtest.engine.regress_rounds import decide, look_schedule
from abtest.stats import Pair, compare_pair
from abtest.stats.contrast import metric_step
from abtest.stats.intervals import FloatArray
from abtest.stats.regress_sim import regress_codes
from abtest.stats.resolution import grid_step, paired_coarse

pytestmark = pytest.mark.calibration

SIMS = draws(20_000, 2_000)
LAB = load_playbook("lab-regression")
LAB_LOOKS = look_schedule(LAB.rounds, LAB.max_rounds)
ALPHA_HALF = (1.0 - LAB.confidence) / 2.0
REDUCTION = np.array([1.0, -1.0])  # log baseline - log treatment; cells (baseline, treatment)
GRID_REASON = "more pods per batch"


def _gate(
    seed: int, truths: list[float], margin: float | None = None, **shape: float
) -> FloatArray:
    cells = ticked(np.random.default_rng(seed), sims=SIMS, blocks=LAB_LOOKS[-1],
                   truth_pct=truths, **shape)  # type: ignore[arg-type]  # fmt: skip
    return regress_codes(cells, LAB_LOOKS, LAB.confidence, margin or LAB.margin_pct)


ONE_TICK = [(base, noise) for base in (2.7, 5.5) for noise in (0.02, 0.035)]


@pytest.mark.parametrize(("base", "noise"), ONE_TICK)
def test_rounds_on_one_tick_never_pass_a_slowdown_the_tick_hides(base: float, noise: float) -> None:
    margin = LAB.margin_pct
    at_margin = _gate(700, [margin, margin], base=base, noise=noise)
    hinge = _gate(701, [margin, -15.0], base=base, noise=noise)
    slower = _gate(702, [10.0, 10.0], base=base, noise=noise)
    wrong_pass = max(float(np.mean(at_margin == 0)), float(np.mean(hinge == 0)))
    wrong_fail = float(np.mean(at_margin == 2))
    slower_pass = float(np.mean(slower == 0))
    print(f"one tick, {base} s, {noise:.1%} noise: wrong PASS {wrong_pass:.2%}, wrong FAIL "
          f"{wrong_fail:.2%}, 10 % slower PASSes {slower_pass:.2%}")  # fmt: skip
    # before: 40-94 % wrong PASS, 3-18 % of 10 % slowdowns PASSed; now 0.00 % at full size.
    # A true 2.5 % at 2 000 gates lands within +-1.0 pt (3 sigma), allowed past it here
    allowed = ALPHA_HALF + slack(ALPHA_HALF, SIMS)
    assert wrong_pass <= allowed and wrong_fail <= allowed and slower_pass <= allowed


@pytest.mark.parametrize("noise", [0.02, 0.035, 0.08])
@pytest.mark.parametrize("base", [2.7, 5.5])
def test_ticks_with_10_ms_jitter_keep_the_gate_within_alpha_over_two(
    base: float, noise: float
) -> None:
    margin = LAB.margin_pct
    shape = {"base": base, "noise": noise, "jitter": 0.01, "drift": 0.05}
    at_margin = _gate(710, [margin, margin], **shape)
    hinge = _gate(711, [margin, -15.0], **shape)
    wrong_pass = max(float(np.mean(at_margin == 0)), float(np.mean(hinge == 0)))
    wrong_fail = float(np.mean(at_margin == 2))
    print(f"ticks + 10 ms, {base} s, {noise:.1%} noise: wrong PASS {wrong_pass:.2%}, "
          f"wrong FAIL {wrong_fail:.2%}")  # fmt: skip
    allowed = ALPHA_HALF + slack(ALPHA_HALF, SIMS)
    assert wrong_pass <= allowed and wrong_fail <= allowed


def _reduction(seed: int, blocks: int, **shape: float) -> tuple[float, float, float]:
    """(coverage when given, share given, share without an interval that has no reason) of
    the 95 % log-ratio interval of a true 10 % reduction, one comparison per experiment."""
    cells = ticked(np.random.default_rng(seed), sims=SIMS, blocks=blocks, truth_pct=-10.0,
                   decisions=1, **shape)[:, 0]  # type: ignore[arg-type]  # fmt: skip
    step = grid_step(cells.reshape(SIMS, -1))
    found = paired_coarse(cells, REDUCTION, step, 0.95, log=True)
    r = found.intervals
    given = ~found.coarse & (r.se > 0)
    truth = -np.log(0.9)
    covered = given & (r.lo <= truth) & (truth <= r.hi)
    coverage = float(covered.sum() / given.sum()) if given.any() else float("nan")
    return coverage, float(given.mean()), float(np.mean(~given & ~found.coarse))


@pytest.mark.parametrize(("base", "noise"), ONE_TICK)
def test_rounds_on_one_tick_get_an_interval_that_covers_or_none(base: float, noise: float) -> None:
    coverage, given, silent = _reduction(720, 3, base=base, noise=noise)
    print(f"one tick, {base} s, {noise:.1%} noise, 3 blocks: {given:.1%} given, covering "
          f"{coverage:.1%}; no interval and no reason {silent:.2%}")  # fmt: skip
    # before: 0-1 % covered at 2.7 s (every interval given). Now none at 2.7 s; at 5.5 s the
    # arms sit on two ticks and the floored interval covers 100 % (conservative: 2 df and a
    # floor). At 2 000 experiments a true 93 % would show within +-1.7 pts (3 sigma)
    assert np.isnan(coverage) or coverage >= 0.93 - slack(0.07, SIMS)
    assert silent == 0.0  # every refusal is the grid's, with its reason


@pytest.mark.parametrize("blocks", [3, 6, 10, 20])
@pytest.mark.parametrize("base", [2.7, 5.5])
def test_whole_seconds_without_an_interval_say_why(base: float, blocks: int) -> None:
    shape = {"base": base, "noise": 0.08, "drift": 0.05, "whole": True}
    coverage, given, silent = _reduction(730 + blocks, blocks, **shape)
    print(f"whole seconds, {base} s, {blocks} blocks: no interval {1 - given:.1%} "
          f"(no reason {silent:.2%}), covering {coverage:.1%} when given")  # fmt: skip
    # before: up to 3.8 % of 2.7 s comparisons had no interval and only "no variation".
    # Coverage is printed, not asserted: at 2.7 s rounding is partly a bias the floor does not
    # cover, and 10-20 blocks undercover (docs/statistics.md, "not covered")
    assert silent == 0.0


@pytest.mark.parametrize("blocks", [6, 10, 20])
@pytest.mark.parametrize("base", [2.7, 5.5])
def test_one_second_ticks_are_not_taken_for_two(base: float, blocks: int) -> None:
    cells = ticked(np.random.default_rng(740 + blocks), sims=SIMS, blocks=blocks,
                   truth_pct=-10.0, decisions=1, base=base, noise=0.08, drift=0.05,
                   jitter=0.01)[:, 0]  # fmt: skip
    step = grid_step(cells.reshape(SIMS, -1))
    print(f"1 s ticks, {base} s, {blocks} blocks: 2 s grid {np.mean(step == 2):.1%}, "
          f"1 s {np.mean(step == 1):.1%}")  # fmt: skip
    # before: a 2 s grid in 20-59 % of 2.7 s comparisons (then refused as too coarse); now
    # 1 s in every one at full size
    assert np.all(step == 1.0)


def test_decide_on_frames_refuses_rounds_on_one_tick_as_the_simulation_does() -> None:
    """The live gate (``decide`` on frames, the resolution over the whole frame) gives the
    simulated verdicts on rounds on one tick, and its note says why and what to do."""
    # 30 gates under --calibration, 10 in the fast tier: a disagreement on a share q of gates
    # goes unseen with probability (1 - q)^n, at 10 gates under 5 % for q >= 26 %
    cells = ticked(np.random.default_rng(750), sims=draws(30, 10), blocks=9,
                   truth_pct=[LAB.margin_pct] * 2)  # fmt: skip
    for decisions in live_looks(cells, LAB):
        for d in decisions:
            assert d.slowdown_ci is not None or GRID_REASON in d.note


def _frame(values: dict[str, list[float]], size: int = 10) -> pd.DataFrame:
    rows = [{"arm": arm, "size": size, "block": b, "m": v}
            for arm, vs in values.items() for b, v in enumerate(vs)]  # fmt: skip
    return pd.DataFrame(rows)


def test_the_resolution_is_the_whole_runs() -> None:
    """Two blocks on one tick show no grid of their own (too few values for jitter); the run's
    other size, or the node's history, does, and the comparison is refused with the reason."""
    own = _frame({"b": [3.012, 3.004], "t": [3.009, 3.001]})
    alone = compare_pair(own, Pair("b", "t", 10, "m"))
    assert alone.pct_ci is not None  # no grid shown by four values: the plain t
    other = _frame({"b": [5.01, 6.02, 5.99, 6.0], "t": [6.01, 7.0, 6.02, 5.01]}, size=20)
    run = pd.concat([own, other], ignore_index=True)
    assert metric_step(run, own, "m", None) == 1.0
    refused = compare_pair(run, Pair("b", "t", 10, "m"))
    assert refused.pct_ci is None and GRID_REASON in refused.pct_note
    from_history = compare_pair(own, Pair("b", "t", 10, "m"), history=other)
    assert from_history.pct_ci is None and GRID_REASON in from_history.pct_note
    (gate,) = decide(own, reference="b", candidate="t", sizes=[10], metrics=["m"],
                     margin_pct=5.0, confidence=0.95, history=other)  # fmt: skip
    assert gate.verdict == "INCONCLUSIVE" and GRID_REASON in gate.note
    # a run's grid under 1 % of this comparison's values is no coarseness for it
    slow = _frame({"b": [200.0, 211.0, 205.0], "t": [190.0, 199.0, 195.0]}, size=150)
    assert metric_step(pd.concat([other, slow]), slow, "m", None) == 0.0


# --- rounds at a uniform phase of the relist: what the random start gives ---------------------
# Each round's first create waits a uniform 0..1 s (abtest.batch.start_phase), so its phase of
# the kubelet's 1 s relist is uniform whatever the kubelet's own phase (``start_dither=1`` on
# a spread of 0.1-0.5 s is ``phase_spread=1``, the truth's reference). Without it a run's
# rounds start at much the same phase (0.1-0.5 s of spread) and the metric's own change is not
# the work's: +5 % of work is +1 % of batch time at 0.1 s of spread and +13 % at 0.3 s (2.7 s),
# so no analysis of the batch times can be right about it.
UNIFORM = 1.0


def _work_for(metric_pct: float, base: float, noise: float) -> float:
    """The work's change (%) that moves the batch time's mean log by log(1 + metric_pct) at a
    uniform phase: a batch waits half a tick on average, so the work moves more than the time."""
    rng = np.random.default_rng(99)
    shape = {"sims": 1, "blocks": 200_000, "decisions": 1, "base": base, "noise": noise}
    lo, hi = metric_pct, 3.0 * metric_pct
    for _ in range(30):
        mid = (lo + hi) / 2
        cells = ticked(rng, truth_pct=mid, phase_spread=UNIFORM, **shape)  # type: ignore[arg-type]
        moved = float(np.mean(np.log(cells[..., 1]) - np.log(cells[..., 0])))
        lo, hi = (mid, hi) if moved < np.log1p(metric_pct / 100) else (lo, mid)
    return (lo + hi) / 2


# the kubelet's own phase spread under the random start: 0.1 s (one shared phase), 0.5 s
RANDOM_START = [(base, noise, margin, spread) for base in (2.7, 5.5) for noise in (0.02, 0.035)
                for margin, spread in ((LAB.margin_pct, 0.1), (28.0, 0.5))]  # fmt: skip


@pytest.mark.parametrize(("base", "noise", "margin", "spread"), RANDOM_START)
def test_rounds_at_a_random_phase_keep_the_gate_within_alpha_over_two(
    base: float, noise: float, margin: float, spread: float
) -> None:
    """Issue 46's relist-shaped row: the gate at ``lab-regression``'s margin and at the 28 %
    docs/regression-gate.md shows, the candidate's batch time exactly at the margin; the
    rounds would share a phase (``spread``) but for the random start's 0-1 s wait."""
    work = _work_for(margin, base, noise)
    shape = {"base": base, "noise": noise, "phase_spread": spread, "start_dither": 1.0}
    at_margin = _gate(760, [work, work], margin=margin, **shape)
    hinge = _gate(761, [work, -15.0], margin=margin, **shape)
    wrong_pass = max(float(np.mean(at_margin == 0)), float(np.mean(hinge == 0)))
    wrong_fail = float(np.mean(at_margin == 2))
    print(f"random start over {spread:g} s, {base} s, {noise:.1%} noise, margin {margin:g} % (work "
          f"{work:+.1f} %): wrong PASS {wrong_pass:.2%}, wrong FAIL {wrong_fail:.2%}")  # fmt: skip
    # before the random start (0.1-0.5 s of spread, the same gate): wrong PASS up to 55.9 %,
    # wrong FAIL up to 12.4 % at 5 % and 53 % at 28 %. Now at most 1.17 % and 2.53 % at full
    # size: the batch time sits exactly at the margin, where a test that keeps its level FAILs
    # alpha / 2 of the time, so the estimate's own 3 sigma (0.33 pt at 20 000) is allowed
    allowed = ALPHA_HALF + sigma3(ALPHA_HALF, SIMS)
    assert wrong_pass <= allowed and wrong_fail <= allowed


@pytest.mark.parametrize("blocks", [3, 6, 10])
@pytest.mark.parametrize(("base", "noise"), ONE_TICK)
def test_rounds_at_a_random_phase_get_a_reduction_interval_that_covers(
    base: float, noise: float, blocks: int
) -> None:
    truth = _log_reduction(base, noise)  # 10 % less work: less than 10 % less batch time
    cells = ticked(np.random.default_rng(770 + blocks), sims=SIMS, blocks=blocks,
                   truth_pct=-10.0, decisions=1, base=base, noise=noise, phase_spread=0.3,
                   start_dither=1.0)[:, 0]  # fmt: skip
    step = grid_step(cells.reshape(SIMS, -1))
    found = paired_coarse(cells, REDUCTION, step, 0.95, log=True)
    r = found.intervals
    given = ~found.coarse & (r.se > 0)
    coverage = float(np.mean(((r.lo <= truth) & (truth <= r.hi))[given]))
    print(f"random start over 0.3 s, {base} s, {noise:.1%} noise, {blocks} blocks: "
          f"given {given.mean():.2%}, covering {coverage:.1%}")  # fmt: skip
    # before (0.1-0.5 s of spread): 75.6 / 88.5 / 92.6 % of the work's change at 3 / 6 / 10
    assert given.mean() >= 0.99  # continuous: next to never taken for a grid
    assert 0.93 - slack(0.07, SIMS) <= coverage <= 0.97 + slack(0.03, SIMS)


def _log_reduction(base: float, noise: float) -> float:
    """log baseline - log candidate of the batch time, on average, when the work is 10 % less
    at a uniform phase: the interval's truth."""
    cells = ticked(np.random.default_rng(98), sims=1, blocks=200_000, truth_pct=-10.0,
                   decisions=1, base=base, noise=noise, phase_spread=UNIFORM)  # fmt: skip
    return float(np.mean(np.log(cells[..., 0]) - np.log(cells[..., 1])))
