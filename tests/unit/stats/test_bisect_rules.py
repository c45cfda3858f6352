"""The rules of a bisection step and of the search (abtest.stats.bisect), one by one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from abtest.errors import UserError
from abtest.stats import bisect as b


@pytest.mark.parametrize(
    ("low_slower", "high_slower", "last", "outcome"),
    [
        (True, False, False, b.BAD),
        (False, True, False, b.GOOD),
        (True, True, False, b.SPREAD),
        (False, False, False, b.MORE),
        (False, False, True, b.UNRESOLVED),
        (True, False, True, b.BAD),
    ],
)
def test_a_step_decides_by_which_half_is_slower(
    low_slower: bool, high_slower: bool, last: bool, outcome: int
) -> None:
    assert int(b.decide(np.array(low_slower), np.array(high_slower), last)) == outcome


def test_a_step_on_real_cells_places_a_clear_step() -> None:
    rng = np.random.default_rng(3)
    base = 2.0 * np.exp(rng.normal(0, 0.02, (6, 3)))
    bad_mid = base * np.array([1.0, 1.3, 1.3])
    good_mid = base * np.array([1.0, 1.0, 1.3])
    assert int(b.step_look(bad_mid, look=2, max_looks=3, confidence=0.95).outcome) == b.BAD
    found = b.step_look(good_mid, look=2, max_looks=3, confidence=0.95)
    assert int(found.outcome) == b.GOOD
    est, lo, hi = found.mid_high_pct
    assert lo < 30.0 < hi and est == pytest.approx(30.0, abs=3)


def test_identical_values_give_no_interval_and_no_decision() -> None:
    cells = np.full((4, 3), 2.0)
    found = b.step_look(cells, look=3, max_looks=3, confidence=0.95)
    assert int(found.outcome) == b.UNRESOLVED
    assert np.isnan(found.low_mid_pct[1])


def test_the_search_halves_the_range() -> None:
    assert b.middle(0, 4) == 2 and b.middle(2, 4) == 3
    assert b.next_range(0, 4, 2, b.GOOD) == (2, 4)
    assert b.next_range(0, 4, 2, b.BAD) == (0, 2)
    with pytest.raises(ValueError, match="no build between"):
        b.middle(3, 4)
    with pytest.raises(ValueError, match="moves no end"):
        b.next_range(0, 4, 2, b.SPREAD)


@pytest.mark.parametrize(
    ("builds", "steps"), [(2, 0), (3, 1), (4, 2), (5, 2), (8, 3), (9, 3), (16, 4), (17, 4)]
)
def test_steps_needed(builds: int, steps: int) -> None:
    assert b.steps_needed(builds) == steps


def test_compounding() -> None:
    assert b.compounded(0.0, 4) == 0.0
    assert b.compounded(0.05, 3) == pytest.approx(1 - 0.95**3)
    with pytest.raises(ValueError):
        b.compounded(1.5, 2)
    with pytest.raises(UserError):
        b.steps_needed(1)


def test_cells_keep_complete_blocks_only() -> None:
    rounds = pd.DataFrame(
        {
            "arm": ["low", "mid", "high", "low", "mid", "low", "mid", "high"],
            "block": [0, 0, 0, 1, 1, 2, 2, 2],
            "size": [10] * 8,
            "batch_ready_s": [1.0, 2.0, 3.0, 1.1, 2.1, 1.2, 2.2, 3.2],
        }
    )
    cells = b.cells_of(rounds, ("low", "mid", "high"), 10, "batch_ready_s")
    assert cells.tolist() == [[1.0, 2.0, 3.0], [1.2, 2.2, 3.2]]
