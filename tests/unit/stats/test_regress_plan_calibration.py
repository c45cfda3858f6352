"""Calibration of the regression gate's plan (issue 37 §1): `regress --plan` says how often an
unchanged candidate PASSes and one slower by twice the margin FAILs; the gate run on such data
does that, to within 2 points, on data whose per-block log ratios are normal (8 000 simulated
gates per case through ``regress_codes``, the gate's own rule; seeded). Where the plan says the cap
cannot reach the target, the cap it names does. On relist-shaped and whole-second data the plan
from a normal model over-promises the FAIL rate; planned from the node's own rounds (issue 37
§4, ``round_model``) it is near the gate's; both measured and printed here, and stated in
docs/statistics.md."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from coarse_data import history, rounds

from abtest.stats.intervals import FloatArray
from abtest.stats.power import noise_from_history
from abtest.stats.regress_plan import look_blocks, simulated_plan
from abtest.stats.regress_sim import regress_codes
from abtest.stats.round_model import round_model

pytestmark = pytest.mark.calibration

SIMS = 8_000
MARGIN = 5.0


def _actual(
    mode: str, noise: float, looks: list[int], truth: float, seed: int, sims: int = SIMS
) -> FloatArray:
    cells = rounds(np.random.default_rng(seed), sims=sims, blocks=looks[-1],
                   truth_pct=[truth, truth], decisions=2, noise=noise, rho=0.0,
                   mode=mode)  # fmt: skip
    return regress_codes(cells, looks, 0.95, MARGIN)


def _pilot_sd(mode: str, noise: float, blocks: int = 3000) -> float:
    """The paired log SD `noise_from_history` reads from a long pilot of such data."""
    c = rounds(np.random.default_rng(1), sims=1, blocks=blocks, truth_pct=0.0, noise=noise,
               mode=mode)[0, 0]  # fmt: skip
    frame = pd.DataFrame({"group": "pilot", "block": np.repeat(np.arange(blocks), 2),
                          "arm": ["r", "c"] * blocks, "size": 10, "m": c.reshape(-1)})  # fmt: skip
    return noise_from_history(frame, metric="m", size=10).sd_log_diff


CASES = [(0.035, 5, 20), (0.05, 5, 20), (0.02, 3, 9), (0.035, 3, 9)]


@pytest.mark.parametrize(("noise", "first", "cap"), CASES)
def test_planned_rates_are_the_gates_rates_on_normal_data(
    noise: float, first: int, cap: int
) -> None:
    sd = noise * np.sqrt(2.0)  # the per-block log ratio of two rounds with this noise
    plan = simulated_plan(
        [sd, sd], first_look=first, cap=cap, margin_pct=MARGIN, confidence=0.95, search=False
    )
    looks = list(plan.looks)
    unchanged = _actual("exact", noise, looks, 0.0, 2)
    slower = _actual("exact", noise, looks, 2 * MARGIN, 3)
    at_margin = _actual("exact", noise, looks, MARGIN, 4)
    passed, failed = float(np.mean(unchanged == 0)), float(np.mean(slower == 2))
    print(f"noise {noise}, looks {looks}: PASS planned {plan.pass_if_unchanged:.1%} gate "
          f"{passed:.1%}; FAIL at 2x margin planned {plan.fail_if_twice_margin:.1%} gate "
          f"{failed:.1%}; at the margin FAIL {np.mean(at_margin == 2):.1%} PASS "
          f"{np.mean(at_margin == 0):.1%}")  # fmt: skip
    assert abs(plan.pass_if_unchanged - passed) <= 0.02
    assert abs(plan.fail_if_twice_margin - failed) <= 0.02
    assert np.mean(at_margin == 2) <= 0.025 and np.mean(at_margin == 0) <= 0.025


def test_the_shipped_regression_gate_rarely_passes_and_the_plan_says_what_would() -> None:
    """The issue's finding, as the plan states it: 8 % round noise, looks 5/10/15/20, margin
    5 %: an unchanged build PASSes about 3 %, and the plan names a cap and a margin that
    reach 80 %; the cap it names does (checked by the gate's own rule)."""
    sd = 0.08 * np.sqrt(2.0)
    plan = simulated_plan([sd, sd], first_look=5, cap=20, margin_pct=MARGIN, confidence=0.95)
    print(plan)
    assert plan.pass_if_unchanged < 0.10 and not plan.reaches
    assert plan.cap_that_would is not None and plan.margin_that_would is not None
    looks = list(look_blocks(5, plan.cap_that_would))
    passed = float(np.mean(_actual("exact", 0.08, looks, 0.0, 5, sims=2_000) == 0))
    assert passed >= 0.80 - 0.03
    wider = simulated_plan([sd, sd], first_look=5, cap=20, margin_pct=plan.margin_that_would,
                      confidence=0.95, search=False)  # fmt: skip
    assert min(wider.pass_if_unchanged, wider.fail_if_twice_margin) >= 0.80 - 0.03


@pytest.mark.parametrize("mode", ["relist", "whole"])
def test_on_coarse_data_the_plan_over_promises_the_fail_rate(mode: str) -> None:
    """Measured, not hidden: planned from a long pilot of such data, the PASS rate holds within
    12 points but the FAIL rate at twice the margin is promised too high (by up to 14 points
    here). `regress --plan` says so when the history is coarse."""
    sd = _pilot_sd(mode, 0.035)
    for first, cap in ((3, 9), (5, 20)):
        plan = simulated_plan([sd, sd], first_look=first, cap=cap, margin_pct=MARGIN,
                         confidence=0.95, search=False)  # fmt: skip
        looks = list(plan.looks)
        passed = float(np.mean(_actual(mode, 0.035, looks, 0.0, 6, 4_000) == 0))
        failed = float(np.mean(_actual(mode, 0.035, looks, 2 * MARGIN, 7, 4_000) == 2))
        print(f"{mode}, looks {looks}: PASS planned {plan.pass_if_unchanged:.1%} gate "
              f"{passed:.1%}; FAIL planned {plan.fail_if_twice_margin:.1%} "
              f"gate {failed:.1%}")  # fmt: skip
        assert abs(plan.pass_if_unchanged - passed) <= 0.12
        assert failed <= plan.fail_if_twice_margin + 0.02  # over-promised, never under


def _planned_from_rounds(mode: str, first: int, cap: int) -> tuple[float, float, float, float]:
    """(PASS, FAIL) planned from the node's rounds and from the normal model, each decision's
    history 3 runs x 5 blocks x 4 arms at 3.5 % work noise, averaged over 3 node histories."""
    out = []
    for h in range(3):
        # two independent histories, one per decision, named apart: rounds of the same name
        # would be drawn together (issue 46: a plan's decisions share their history rounds)
        frames = [history(np.random.default_rng(200 + 10 * h + i), mode=mode, noise=0.035)
                  for i in range(2)]  # fmt: skip
        for i, f in enumerate(frames):
            f["group"] = [f"d{i}-{g}" for g in f["group"]]
        models = [round_model(f, metric="m", size=10) for f in frames]
        sds = [noise_from_history(f, metric="m", size=10).sd_log_diff for f in frames]
        kw = {"first_look": first, "cap": cap, "margin_pct": MARGIN, "confidence": 0.95,
              "search": False, "simulations": 2_000}  # fmt: skip
        node = simulated_plan(sds, models=models, **kw)  # type: ignore[arg-type]
        normal = simulated_plan(sds, **kw)  # type: ignore[arg-type]
        assert node.from_rounds and not normal.from_rounds
        out.append((node.pass_if_unchanged, node.fail_if_twice_margin,
                    normal.pass_if_unchanged, normal.fail_if_twice_margin))  # fmt: skip
    a, b, c, d = np.mean(out, axis=0)
    return float(a), float(b), float(c), float(d)


FROM_ROUNDS = [
    (mode, first, cap, within)
    for mode, within in (("exact", 0.05), ("tick", 0.10))
    for first, cap in ((3, 9), (5, 20))
]


@pytest.mark.parametrize(("mode", "first", "cap", "within"), FROM_ROUNDS)
def test_planned_from_the_nodes_rounds_the_rates_are_near_the_gates(
    mode: str, first: int, cap: int, within: float
) -> None:
    """Issue 37 §4 for the gate: simulated from the node's own rounds (a 60-round history per
    decision) the plan's PASS and FAIL rates are the gate's within 5 points on normal data and
    within 10 on relist-shaped data (work plus the wait to the next 1 s tick), where the normal
    model promised a FAIL rate up to 30 points too high."""
    passed, failed, normal_pass, normal_fail = _planned_from_rounds(mode, first, cap)
    looks = list(look_blocks(first, cap))
    gate_pass = float(np.mean(_actual(mode, 0.035, looks, 0.0, 6, 4_000) == 0))
    gate_fail = float(np.mean(_actual(mode, 0.035, looks, 2 * MARGIN, 7, 4_000) == 2))
    print(f"{mode}, looks {looks}: PASS planned {passed:.1%} (normal model {normal_pass:.1%}) "
          f"gate {gate_pass:.1%}; FAIL planned {failed:.1%} (normal model {normal_fail:.1%}) "
          f"gate {gate_fail:.1%}")  # fmt: skip
    assert abs(passed - gate_pass) <= within and abs(failed - gate_fail) <= within
    assert abs(failed - gate_fail) <= abs(normal_fail - gate_fail) + 0.02


@pytest.mark.parametrize("mode", ["whole", "tickish"])
def test_where_the_plan_from_rounds_misses_by_how_much(mode: str) -> None:
    """Measured, not hidden, where the plan from rounds misses by more than 10 points.
    Rounded whole seconds read as tick-ended (the wait is not scaled by the effect): the FAIL
    rate is planned 16 points low at looks 5/10/15/20. Whole-second-ish rounds (20 ms jitter)
    at 3.5 % noise often all land on one tick, where the analysis sees no grid and gives the
    plain t: the gate PASSes an unchanged candidate far more often than planned (27.8 against
    7.1 % at 3/6/9) and FAILs one 10 % slower less often (34.7 against 47.0 % at 5/10/15/20)."""
    for first, cap in ((3, 9), (5, 20)):
        passed, failed, _, _ = _planned_from_rounds(mode, first, cap)
        looks = list(look_blocks(first, cap))
        gate_pass = float(np.mean(_actual(mode, 0.035, looks, 0.0, 6, 4_000) == 0))
        gate_fail = float(np.mean(_actual(mode, 0.035, looks, 2 * MARGIN, 7, 4_000) == 2))
        print(f"{mode}, looks {looks}: PASS planned {passed:.1%} gate {gate_pass:.1%}; "
              f"FAIL planned {failed:.1%} gate {gate_fail:.1%}")  # fmt: skip
        assert passed <= gate_pass + 0.05 and failed <= gate_fail + 0.13
