"""Calibration of power plans from the node's own rounds (issue 37 §4).

The plan (``round_model`` + ``plan_from_rounds``) is made from a simulated node history: 3 runs
of 5 blocks of 4 arms (60 rounds, each arm with its own real effect, block drift), averaged
over 8 such histories. The truth is a separate simulation (``coarse_data.rounds``: other
random numbers, the effect on the work, then the observation) counted through ``detects``,
which a test here holds to ``compare_pair`` frame by frame. Planned and simulated power for a
10 % slowdown and a 10 % reduction at 3, 4 and 6 blocks must agree within 5 points, on normal
data and on relist-shaped data (work plus a wait to the next 1 s tick; whole seconds, and with
20 ms of jitter). Rounded whole seconds are planned low (the plan reads them as tick-ended);
rounds ending on a tick at a random phase look continuous and are planned high: both measured
and bounded here.

The figures printed (``pytest -s``) are the ones in docs/statistics.md.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from coarse_data import history, rounds

from abtest.stats import Pair, compare_pair
from abtest.stats.intervals import FloatArray
from abtest.stats.power import noise_from_history, paired_power
from abtest.stats.power_sim import detects, plan_from_rounds, power_for
from abtest.stats.round_model import draws, find_ticks, round_model

pytestmark = pytest.mark.calibration

FloatPair = tuple[float, float]
HISTORIES = 8
SIMS = 10_000
BLOCKS = (3, 4, 6)
EFFECT = 10.0


def _planned(mode: str, noise: float = 0.08) -> tuple[dict[int, FloatPair], dict[int, float]]:
    """Mean planned power (slowdown, reduction) per blocks, and the normal model's."""
    sims: dict[int, list[FloatPair]] = {b: [] for b in BLOCKS}
    normal: dict[int, list[float]] = {b: [] for b in BLOCKS}
    for h in range(HISTORIES):
        frame = history(np.random.default_rng(100 + h), mode=mode, noise=noise)
        model = round_model(frame, metric="m", size=10)
        assert model is not None
        sd = noise_from_history(frame, metric="m", size=10).sd_log_diff
        d = draws(model, 1_000, max(BLOCKS), 37)
        for b in BLOCKS:
            sims[b].append(power_for(model, d, EFFECT, b, 0.95))
            normal[b].append(paired_power(math.log1p(EFFECT / 100), sd, b, 0.95))
    return (
        {b: _pair(np.mean(sims[b], axis=0)) for b in BLOCKS},
        {b: float(np.mean(normal[b])) for b in BLOCKS},
    )


def _pair(values: FloatArray) -> FloatPair:
    return float(values[0]), float(values[1])


def _simulated(mode: str, blocks: int, seed: int, noise: float = 0.08) -> FloatPair:
    out = []
    for truth in (EFFECT, -EFFECT):
        cells = rounds(np.random.default_rng(seed), sims=SIMS, blocks=blocks, truth_pct=truth,
                       mode=mode, noise=noise)[:, 0]  # fmt: skip
        out.append(float(detects(cells, 0.95).mean()))
        seed += 1
    return out[0], out[1]


CASES = [("exact", 0.08), ("exact", 0.03), ("tick", 0.08), ("tick", 0.03), ("tickish", 0.08)]


@pytest.mark.parametrize(("mode", "noise"), CASES)
def test_planned_power_is_the_analysis_power_within_5_points(mode: str, noise: float) -> None:
    planned, normal = _planned(mode, noise)
    for b in BLOCKS:
        actual = _simulated(mode, b, 700 + 10 * b, noise)
        print(f"{mode} {noise:.0%} noise, {b} blocks: planned {planned[b][0]:.1%} / "
              f"{planned[b][1]:.1%}, simulated {actual[0]:.1%} / {actual[1]:.1%} "
              f"(slower / faster); normal model {normal[b]:.1%}")  # fmt: skip
        assert abs(planned[b][0] - actual[0]) <= 0.05
        assert abs(planned[b][1] - actual[1]) <= 0.05


def test_on_rounded_whole_seconds_the_plan_errs_low_by_at_most_7_points() -> None:
    """Rounded (not tick-ended) whole seconds look the same as tick-ended ones, so the plan
    takes half a second of each round for a wait the effect does not scale: measured, it
    promises up to 3.7 points less than the analysis delivers at 6 blocks, never more."""
    planned, normal = _planned("whole")
    for b in BLOCKS:
        actual = _simulated("whole", b, 700 + 10 * b)
        print(f"whole {b} blocks: planned {planned[b][0]:.1%} / {planned[b][1]:.1%}, simulated "
              f"{actual[0]:.1%} / {actual[1]:.1%}; normal model {normal[b]:.1%}")  # fmt: skip
        for side in (0, 1):
            assert -0.07 <= planned[b][side] - actual[side] <= 0.05


def test_the_normal_model_over_promised_on_relist_shaped_rounds() -> None:
    """Why §4: the noncentral t from the same histories promised far more than the analysis
    does on whole-second tick-ended rounds (3 % work noise: over 20 points at 3 and 4 blocks)."""
    planned, normal = _planned("tick", 0.03)
    for b in (3, 4):
        actual = _simulated("tick", b, 700 + 10 * b, 0.03)
        assert normal[b] - actual[0] > 0.20 and abs(planned[b][0] - actual[0]) <= 0.05


def test_a_random_phase_relist_looks_continuous_and_is_over_promised_by_at_most_10_points() -> None:
    """A batch that starts at a random phase of the tick is continuous (no grid, no 1 s
    clustering): the wait's share of a round is not seen, and the effect is applied to all of
    it. Measured: planned over simulated by up to 5.5 points at 6 blocks (docs/statistics.md)."""
    planned, normal = _planned("relist")
    for b in BLOCKS:
        actual = _simulated("relist", b, 700 + 10 * b)
        print(f"relist (random phase) {b} blocks: planned {planned[b][0]:.1%} / "
              f"{planned[b][1]:.1%}, simulated {actual[0]:.1%} / {actual[1]:.1%}; "
              f"normal model {normal[b]:.1%}")  # fmt: skip
        assert -0.02 <= planned[b][0] - actual[0] <= 0.10
        assert -0.02 <= planned[b][1] - actual[1] <= 0.10


@pytest.mark.parametrize("mode", ["whole", "exact"])
def test_detects_is_what_compare_prints(mode: str) -> None:
    """``detects`` on arrays is ``compare_pair``'s percent interval excluding 0, frame by frame
    (whole seconds: the floor and the refusal included)."""
    cells = rounds(np.random.default_rng(5), sims=60, blocks=4, truth_pct=12.0, mode=mode,
                   noise=0.05)[:, 0]  # fmt: skip
    found = detects(cells, 0.95)
    assert 0 < found.sum() < found.size  # both outcomes occur
    for i in range(cells.shape[0]):
        frame = pd.DataFrame({"arm": ["ref"] * 4 + ["cand"] * 4, "size": 10,
                              "block": [*range(4)] * 2, "m": cells[i].T.ravel()})  # fmt: skip
        c = compare_pair(frame, Pair("ref", "cand", 10, "m"))
        shown = c.pct_ci is not None and (c.pct_ci[0] > 0 or c.pct_ci[1] < 0)
        assert shown == bool(found[i]), (i, c.note)


def test_ticks_are_found_on_a_grid_and_near_whole_seconds_only() -> None:
    rng = np.random.default_rng(3)
    work = 5.5 * np.exp(rng.normal(0, 0.08, 60))
    assert find_ticks(np.ceil(work))[0] == 1.0
    tick, phases = find_ticks(np.ceil(work) + rng.normal(0, 0.02, 60))
    assert tick == 1.0 and phases.size == 60
    assert find_ticks(work)[0] == 0.0  # continuous
    assert find_ticks(np.ceil(work + rng.uniform(size=60)) - rng.uniform(size=60))[0] == 0.0
    assert find_ticks(5.5 + rng.normal(0, 0.02, 60))[0] == 0.0  # all within one second


def test_too_little_history_is_no_model_and_the_plan_is_deterministic() -> None:
    frame = history(np.random.default_rng(1), runs=1, blocks=4, arms=4)  # 16 rounds
    assert round_model(frame, metric="m", size=10) is None
    model = round_model(history(np.random.default_rng(1)), metric="m", size=10)
    assert model is not None and model.tick == 1.0 and model.n_rounds == 60
    first = plan_from_rounds(model, 6, 0.95, EFFECT)
    assert first == plan_from_rounds(model, 6, 0.95, EFFECT)
    assert first.power_at is not None and first.blocks_needed is not None
    assert first.blocks_needed > 6 and first.mde_pct > EFFECT  # 10 % is under-powered at 6
