"""Calibration of the regression gate's OVERALL verdict (issue 11 item 16).

docs/statistics.md promises: over all looks and all (size, metric) decisions, the overall
verdict (the worst decision) is a wrong FAIL at most alpha / 2 of the time and a wrong PASS at most
alpha / 2 of the time. This file measures exactly that, by simulation, for the shipped
`regression` playbook's family (one size x two metrics, looks at 5, 10, 15, 20 blocks,
alpha = 0.05, margin 5 %) and for a larger family (two sizes x two metrics):

- wrong FAIL: every true slowdown exactly at the margin (the hardest honest case: any FAIL
  claims "> margin"); the overall verdict FAILs at most 2.5 % of the time;
- wrong PASS: one decision's true slowdown at the margin, the others clearly faster (so they
  PASS and the overall verdict hinges on the one at the margin), and every one at the margin;
  the overall verdict PASSes at most 2.5 % of the time.

Each per-block log ratio has sd 0.08 x sqrt(2) (8 % round-to-round noise on each side; block
effects cancel in the pairing). Metrics are simulated independent (the worst case for the union
bound) and correlated (rho = 0.7, closer to batch ready time vs P95). The gate stops at the first
look whose overall verdict is not INCONCLUSIVE, as the live gate does. The simulation uses the
stats functions the gate uses (``look_confidence``, ``one_sample_t``, ``classify``) and a check
below shows ``decide`` + ``overall_verdict`` on real frames give the same overall verdicts.
Seeded, 20 000 simulated gates per case under ``scripts/test --calibration`` (the figures in
docs/statistics.md), 6 000 in the fast tier (the bound beside each assertion); the gates at the
margin are simulated once per family and read by both the wrong-FAIL and the wrong-PASS test.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd
import pytest
from calibration import draws, slack

from abtest.config.playbook import load_playbook
from abtest.engine.regress_rounds import decide, look_schedule
from abtest.stats import overall_verdict
from abtest.stats.intervals import one_sample_t
from abtest.stats.regress_decision import classify, look_confidence

pytestmark = pytest.mark.calibration

SIMULATIONS = draws(20_000, 6_000)
ROUND_NOISE = 0.08
PB = load_playbook("regression")
ALPHA = 1.0 - PB.confidence
MARGIN = PB.margin_pct
LOOKS = look_schedule(PB.rounds, PB.max_rounds)
DEFAULT_FAMILY = len(PB.sizes) * len(PB.metrics)


def _log_ratios(seed: int, truths: list[float], rho: float, blocks: int) -> np.ndarray:
    """Per-block log(candidate / reference): (simulations, decisions, blocks)."""
    rng = np.random.default_rng(seed)
    shape = (SIMULATIONS, len(truths), blocks)
    common = rng.normal(size=(SIMULATIONS, 1, blocks))
    own = rng.normal(size=shape)
    noise = np.sqrt(rho) * common + np.sqrt(1.0 - rho) * own
    truth = np.log1p(np.array(truths) / 100.0)[None, :, None]
    ratios: np.ndarray = truth + ROUND_NOISE * np.sqrt(2.0) * noise
    return ratios


def _overall_codes(log_ratios: np.ndarray, level: float) -> np.ndarray:
    """Overall verdict code per simulated gate (0 PASS, 1 INCONCLUSIVE, 2 FAIL): the worst
    decision at each look, stopping at the first look that is not INCONCLUSIVE."""
    final = np.ones(log_ratios.shape[0])
    undecided = np.ones(log_ratios.shape[0], dtype=bool)
    for blocks in LOOKS:
        result = one_sample_t(log_ratios[:, :, :blocks], level)
        codes = classify((np.exp(result.lo) - 1) * 100, (np.exp(result.hi) - 1) * 100, MARGIN)
        overall = codes.max(axis=1)
        final = np.where(undecided, overall, final)
        undecided &= overall == 1
    return final


def _rates(seed: int, truths: list[float], rho: float, *, whole_family: bool = True) -> np.ndarray:
    decisions = len(truths) if whole_family else 1
    level = look_confidence(1.0 - ALPHA, len(LOOKS), decisions)
    return _overall_codes(_log_ratios(seed, truths, rho, LOOKS[-1]), level)


@cache
def _at_margin(decisions: int, rho: float) -> np.ndarray:
    """Every decision's true slowdown at the margin: one population per family and rho,
    read by the wrong-FAIL and the wrong-PASS tests (seed 40 + decisions, the wrong-FAIL
    test's before they shared it)."""
    return _rates(40 + decisions, [MARGIN] * decisions, rho)


CASES = [(k, rho) for k in (DEFAULT_FAMILY, 4) for rho in (0.0, 0.7)]


def test_the_default_family_is_what_this_file_describes() -> None:
    assert pytest.approx(0.05) == ALPHA
    assert (MARGIN, LOOKS) == (5.0, [5, 10, 15, 20])
    assert DEFAULT_FAMILY == 2


@pytest.mark.parametrize(("decisions", "rho"), CASES)
def test_overall_wrong_fail_at_the_margin_is_within_alpha_over_two(
    decisions: int, rho: float
) -> None:
    wrong_fail = float(np.mean(_at_margin(decisions, rho) == 2))
    # full size measured 1.8-2.0 % (20 000 gates: +-0.3 pts at 3 sigma); at 6 000 gates a true
    # 2.5 % lands within +-0.6 pts (3 sigma), so the fast tier allows that much past 2.5 %
    assert wrong_fail <= ALPHA / 2 + slack(ALPHA / 2, SIMULATIONS), wrong_fail


@pytest.mark.parametrize(("decisions", "rho"), CASES)
def test_overall_wrong_pass_is_within_alpha_over_two(decisions: int, rho: float) -> None:
    hinge = _rates(50 + decisions, [MARGIN] + [-15.0] * (decisions - 1), rho)
    for codes in (hinge, _at_margin(decisions, rho)):
        wrong_pass = float(np.mean(codes == 0))
        # measured <= 1.0 % at full size; at 6 000 gates a true 1 % lands within +-0.4 pts
        # (3 sigma), inside 2.5 %: the threshold is the full size's
        assert wrong_pass <= ALPHA / 2, wrong_pass


def test_spending_over_looks_only_breaks_the_promise() -> None:
    """Why alpha is spent over decisions too: with the default two metrics at the margin and
    intervals adjusted for the looks only, the overall verdict FAILs wrongly more than
    alpha / 2 of the time (3.6 % here, as the issue measured)."""
    codes = _rates(40 + DEFAULT_FAMILY, [MARGIN] * DEFAULT_FAMILY, 0.0, whole_family=False)
    # measured 3.6 %; at 6 000 gates it lands within +-0.7 pts (3 sigma), above 2.5 %
    assert float(np.mean(codes == 2)) > ALPHA / 2


def test_a_real_slowdown_still_fails() -> None:
    """The price of the wider intervals is paid in blocks, not in power at a real slowdown."""
    codes = _rates(70, [20.0] * DEFAULT_FAMILY, 0.7)
    # at 6 000 gates a true 95 % lands within +-0.8 pts (3 sigma); the gate FAILs ~99 % here
    assert float(np.mean(codes == 2)) >= 0.95


def test_decide_and_overall_verdict_match_the_simulated_rule() -> None:
    """The gate's own code path (decide over sizes x metrics, overall_verdict) at each look
    gives the simulated overall verdict, so the rates above are rates of the gate."""
    metrics = list(PB.metrics)
    # 25 gates under --calibration, 10 in the fast tier: a disagreement on a share q of gates
    # goes unseen with probability (1 - q)^n, at 10 gates under 5 % for q >= 26 % (25: 11 %)
    log_ratios = _log_ratios(80, [MARGIN + 1.0] * len(metrics), 0.5, LOOKS[-1])[: draws(25, 10)]
    level = look_confidence(1.0 - ALPHA, len(LOOKS), len(metrics))
    names = {0: "PASS", 1: "INCONCLUSIVE", 2: "FAIL"}
    reference = {m: 4.0 * (1 + 0.1 * i) for i, m in enumerate(metrics)}
    for row in range(log_ratios.shape[0]):
        records = []
        for block in range(LOOKS[-1]):
            ref = {"arm": "ref", "size": 150, "block": block}
            cand = {"arm": "cand", "size": 150, "block": block}
            for i, metric in enumerate(metrics):
                ref[metric] = reference[metric]
                cand[metric] = reference[metric] * float(np.exp(log_ratios[row, i, block]))
            records += [ref, cand]
        frame = pd.DataFrame(records)
        for look, blocks in enumerate(LOOKS, start=1):
            decisions = decide(
                frame[frame["block"] < blocks],
                reference="ref",
                candidate="cand",
                sizes=[150],
                metrics=metrics,
                margin_pct=MARGIN,
                confidence=1.0 - ALPHA,
                look=look,
                max_looks=len(LOOKS),
            )
            assert [d.look_confidence for d in decisions] == pytest.approx([level] * len(metrics))
            result = one_sample_t(log_ratios[row : row + 1, :, :blocks], level)
            codes = classify((np.exp(result.lo) - 1) * 100, (np.exp(result.hi) - 1) * 100, MARGIN)
            assert overall_verdict(decisions) == names[int(codes.max())]
