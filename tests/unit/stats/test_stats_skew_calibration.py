"""Issue 26, item 4: intervals under heavy skew and heavy noise at 5 blocks.

Round times are log-normal: a large log SD makes them strongly right-skewed. Vectorised
(20 000 simulated experiments per case, fixed seeds) through the functions the code runs:
``lognormal_mean_interval`` for a two-way cell's mean, ``one_sample_t`` on per-block
differences for the saving in seconds. The figures are in docs/statistics.md.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from abtest.stats import one_sample_t
from abtest.stats.intervals import lognormal_mean_interval
from abtest.stats.twoway import two_way

pytestmark = pytest.mark.calibration

SIMS = 20_000
BLOCKS = 5


def _cell_coverage(round_sd: float, drift_sd: float, seed: int) -> tuple[float, float]:
    """(Cox log-scale interval, plain t on seconds) coverage of a cell's true mean."""
    rng = np.random.default_rng(seed)
    logs = math.log(4.0) + rng.normal(0, drift_sd, (SIMS, BLOCKS))
    logs += rng.normal(0, round_sd, (SIMS, BLOCKS))
    truth = 4.0 * math.exp((drift_sd**2 + round_sd**2) / 2)
    cox = lognormal_mean_interval(logs, 0.95)
    lo, hi = np.exp(cox.lo), np.exp(cox.hi)
    plain = one_sample_t(np.exp(logs), 0.95)
    return (
        float(np.mean((lo <= truth) & (truth <= hi))),
        float(np.mean((plain.lo <= truth) & (truth <= plain.hi))),
    )


@pytest.mark.parametrize(
    ("round_sd", "drift_sd"), [(0.15, 0.3), (0.3, 0.3), (0.5, 0.3), (0.8, 0.3), (0.8, 0.0)]
)
def test_two_way_cell_mean_interval_holds_under_heavy_noise(
    round_sd: float, drift_sd: float
) -> None:
    cox, plain = _cell_coverage(round_sd, drift_sd, seed=int(round_sd * 100 + drift_sd * 10))
    assert 0.93 <= cox <= 0.97, (round_sd, drift_sd, cox)
    if round_sd >= 0.5:
        assert plain < 0.93  # why the method changed: the raw-seconds t undercovers here


def test_two_way_cells_use_the_log_scale_interval() -> None:
    """The table's cell interval is Cox's on the per-block log times, transformed back."""
    times = [2.0, 2.6, 1.9, 3.4, 2.2]
    arms = {"baseline": frozenset(), "+crun": frozenset({"crun"}),
            "+s": frozenset({"s"}), "both": frozenset({"crun", "s"})}  # fmt: skip
    rows = [
        {"arm": arm, "size": 50, "block": b, "batch_ready_s": t * (1 + 0.1 * i)}
        for i, arm in enumerate(arms)
        for b, t in enumerate(times)
    ]
    table = two_way(
        pd.DataFrame(rows), arms=arms, pod_factor="crun", settings=("s",),
        levels=("runc", "crun"), metric="batch_ready_s",
    )  # fmt: skip
    cell = table.cell("runc", False, 50)
    assert cell is not None and cell.ci is not None
    want = lognormal_mean_interval(np.log(times), 0.95)
    assert cell.ci == pytest.approx((math.exp(float(want.lo)), math.exp(float(want.hi))))
    assert cell.mean == pytest.approx(np.mean(times))


# Savings in seconds (B - T, paired t on per-block differences) at 5 blocks, true ratio 0.8:
# calibrated at the noise the lab shows (tests/unit/stats/test_stats_calibration.py), weaker
# when the drift between blocks is heavy. Measured here and documented, not hidden: (round SD,
# block drift SD) -> coverage.
SAVINGS_WEAKER = {(0.15, 0.6): 0.920, (0.3, 1.0): 0.895}


def _savings_coverage(round_sd: float, drift_sd: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    drift = rng.normal(0, drift_sd, (SIMS, BLOCKS))
    base = np.exp(math.log(4.0) + drift + rng.normal(0, round_sd, (SIMS, BLOCKS)))
    treat = np.exp(math.log(3.2) + drift + rng.normal(0, round_sd, (SIMS, BLOCKS)))
    truth = 4.0 * math.exp((drift_sd**2 + round_sd**2) / 2) * 0.2
    got = one_sample_t(base - treat, 0.95)
    return float(np.mean((got.lo <= truth) & (truth <= got.hi)))


@pytest.mark.parametrize(("round_sd", "drift_sd"), [(0.15, 0.3), (0.3, 0.3), (0.5, 0.6)])
def test_savings_interval_holds_at_moderate_skew(round_sd: float, drift_sd: float) -> None:
    coverage = _savings_coverage(round_sd, drift_sd, seed=11)
    assert 0.93 <= coverage <= 0.97, (round_sd, drift_sd, coverage)


@pytest.mark.parametrize(("round_sd", "drift_sd"), list(SAVINGS_WEAKER))
def test_savings_interval_is_weaker_under_heavy_drift_as_documented(
    round_sd: float, drift_sd: float
) -> None:
    """Pins the figures docs/statistics.md gives for where the seconds interval is weaker."""
    coverage = _savings_coverage(round_sd, drift_sd, seed=11)
    assert coverage == pytest.approx(SAVINGS_WEAKER[(round_sd, drift_sd)], abs=0.01)
