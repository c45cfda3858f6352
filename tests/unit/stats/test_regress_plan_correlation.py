"""Calibration of the gate's plan on two correlated metrics (issue 46): batch_ready_s and p95_s
of one batch correlate at about 0.7, and the gate's verdict is the worst of its decisions, so a
plan that drew each decision's rounds independently promised a candidate twice the margin
slower FAILs 10 points more often than the gate does (62.1 against 52.0 % at looks 3/6/9,
60-round histories) and an unchanged one PASSes 8.5 points less. Drawn from the same history
round for every decision (``stats.joint_rounds``) the plan's FAIL rate is the gate's within 2
points; its PASS rate within 2 on normal rounds, 7 on tick-ended ones.

Sizes: each case plans from ``HISTORIES`` seeded node histories (3 runs x 5 blocks x 4 arms,
two metrics at rho 0.7, 3.5 % round noise; ``PLAN_SIMS`` simulated gates each) and takes the
mean; the gate runs ``GATE_SIMS`` times on separate data of the same kind. The spread of a plan
from one 60-round history is wide (SD 8-11 points over histories, part 3's interval); the mean's
over ``HISTORIES`` is what the assertion checks, with the gate's three binomial standard errors
added in the fast tier (``calibration.slack``)."""

from __future__ import annotations

import numpy as np
import pytest
from calibration import draws, slack
from coarse_data import correlated_history, rounds

from abtest.stats.power import noise_from_history
from abtest.stats.regress_plan import look_blocks, simulated_plan
from abtest.stats.regress_sim import regress_codes
from abtest.stats.round_model import round_model

pytestmark = pytest.mark.calibration

MARGIN = 5.0
NOISE = 0.035
RHO = 0.7
HISTORIES = draws(32, 12)
PLAN_SIMS = draws(2_000, 1_000)
GATE_SIMS = draws(8_000, 4_000)


def _gate(mode: str, looks: list[int], truth: float, seed: int) -> float:
    """The gate's rate of its wanted verdict (PASS unchanged, FAIL slower) on such data."""
    cells = rounds(np.random.default_rng(seed), sims=GATE_SIMS, blocks=looks[-1],
                   truth_pct=[truth, truth], decisions=2, noise=NOISE, rho=RHO,
                   mode=mode)  # fmt: skip
    codes = regress_codes(cells, looks, 0.95, MARGIN)
    return float(np.mean(codes == (2 if truth > 0 else 0)))


def _planned(mode: str, first: int, cap: int) -> tuple[float, float]:
    """(PASS unchanged, FAIL at twice the margin) planned, the mean over the histories."""
    out = []
    for h in range(HISTORIES):
        frame = correlated_history(np.random.default_rng(500 + h), rho=RHO, noise=NOISE,
                                   mode=mode)  # fmt: skip
        models = [round_model(frame, metric=m, size=10) for m in ("m", "p")]
        sds = [noise_from_history(frame, metric=m, size=10).sd_log_diff for m in ("m", "p")]
        plan = simulated_plan(sds, models=models, first_look=first, cap=cap, margin_pct=MARGIN,
                              confidence=0.95, search=False, simulations=PLAN_SIMS)  # fmt: skip
        assert plan.from_rounds
        out.append((plan.pass_if_unchanged, plan.fail_if_twice_margin))
    passed, failed = np.mean(out, axis=0)
    return float(passed), float(failed)


CASES = [
    (mode, first, cap, within)
    for mode, within in (("exact", 0.05), ("tick", 0.10))
    for first, cap in ((3, 9), (5, 20))
]


@pytest.mark.parametrize(("mode", "first", "cap", "pass_within"), CASES)
def test_two_correlated_metrics_are_planned_as_the_gate_decides_them(
    mode: str, first: int, cap: int, pass_within: float
) -> None:
    """Measured at full size (32 histories x 2 000 plans, 8 000 gates), planned / gate, and in
    brackets planned with independent draws (the code before): FAIL at +10 % on normal rounds
    53.3 / 52.0 % (62.1) at 3/6/9, 93.9 / 93.7 % (98.1) at 5/10/15/20; tick-ended 5.4 / 3.8 %
    (5.6) and 30.9 / 31.8 % (31.2). PASS unchanged: normal 26.4 / 25.1 % (16.6) and 83.4 /
    83.7 % (79.9); tick-ended 0.8 / 0.9 % (0.3) and 13.5 / 20.4 % (10.4): within 10 points
    there, as the plan from one metric's tick-ended rounds is (test_regress_plan_calibration)."""
    looks = list(look_blocks(first, cap))
    passed, failed = _planned(mode, first, cap)
    gate_pass = _gate(mode, looks, 0.0, 6)
    gate_fail = _gate(mode, looks, 2 * MARGIN, 7)
    print(f"{mode}, looks {looks}: PASS planned {passed:.1%} gate {gate_pass:.1%}; "
          f"FAIL at 2x margin planned {failed:.1%} gate {gate_fail:.1%}")  # fmt: skip
    assert abs(failed - gate_fail) <= 0.05 + slack(gate_fail, GATE_SIMS)
    assert abs(passed - gate_pass) <= pass_within + slack(gate_pass, GATE_SIMS)
