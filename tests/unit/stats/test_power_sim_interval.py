"""Calibration of the interval `abtest plan` states beside a simulated power (issue 46): planned
from one 40-round history of continuous rounds (2 runs x 5 blocks x 4 arms, 3.5 % round noise),
how often does the 90 % interval of the power for a 5 % change hold the power the report's own
rule (``detects``) really has on such data?

Sizes: ``HISTORIES`` seeded histories, each planned with ``SIMS`` simulated experiments (the
plan's own 1 000 at full size); the real power from ``REAL_SIMS`` experiments each way. The
coverage is a binomial rate over the histories: its three standard errors are the fast tier's
slack (``calibration.slack``)."""

from __future__ import annotations

import numpy as np
import pytest
from calibration import draws, slack
from coarse_data import correlated_history, rounds

from abtest.stats.power_sim import detects, plan_from_rounds
from abtest.stats.round_model import round_model

pytestmark = pytest.mark.calibration

HISTORIES = draws(100, 20)
SIMS = draws(1_000, 400)
REAL_SIMS = draws(8_000, 4_000)
PCT = 5.0


def _real_power(blocks: int) -> float:
    """Either way, as the plan's: the smaller of the two directions' detection rates."""
    out = []
    for truth in (PCT, -PCT):
        cells = rounds(np.random.default_rng(8), sims=REAL_SIMS, blocks=blocks, truth_pct=truth,
                       noise=0.035, rho=0.0, mode="exact")[:, 0]  # fmt: skip
        out.append(float(detects(cells, 0.95, continuous=True).mean()))
    return min(out)


@pytest.mark.parametrize("blocks", [6, 10])
def test_the_power_interval_holds_the_real_power(blocks: int) -> None:
    """Measured at full size (100 histories): real power 49.8 % at 6 blocks, 79.5 % at 10; the
    plan's single figure moves 11-12 points (SD) from one history to the next; its 90 %
    interval (34 points wide at 24 df) held the real power in 89 and 86 % of histories."""
    real = _real_power(blocks)
    held, widths = [], []
    for h in range(HISTORIES):
        frame = correlated_history(np.random.default_rng(700 + h), runs=2, metrics=("m",))
        model = round_model(frame, metric="m", size=10)
        assert model is not None and model.df == 24
        plan = plan_from_rounds(model, blocks, 0.95, PCT, simulations=SIMS)
        assert plan.power_interval is not None and plan.power_at is not None
        lo, hi = plan.power_interval
        assert lo <= plan.power_at <= hi
        held.append(lo <= real <= hi)
        widths.append(hi - lo)
    covered = float(np.mean(held))
    print(f"{blocks} blocks: real power {real:.1%}; the 90 % interval held it in {covered:.0%} "
          f"of {HISTORIES} histories, mean width {np.mean(widths):.1%}")  # fmt: skip
    assert covered >= 0.80 - slack(0.90, HISTORIES)


def test_on_tick_ended_rounds_the_power_has_no_interval() -> None:
    frame = correlated_history(np.random.default_rng(3), metrics=("m",), mode="tick")
    model = round_model(frame, metric="m", size=10)
    assert model is not None and model.tick > 0
    assert plan_from_rounds(model, 6, 0.95, PCT, simulations=200).power_interval is None
