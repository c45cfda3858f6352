"""The rounds frame's shared helpers: which sizes and arms a comparison with the baseline
covers (compare and node_interactions both walk ``vs_baseline``), and the baseline check."""

from __future__ import annotations

import pandas as pd
import pytest

from abtest.errors import UserError
from abtest.stats.frame import check_baseline, sizes_of, vs_baseline


def _rounds() -> pd.DataFrame:
    # B first appears before A over all rounds, but A comes first at size 20.
    return pd.DataFrame(
        {
            "arm": ["base", "B", "base", "A", "B", "base", "C"],
            "size": [10, 10, 20, 20, 20, 30, 40],
            "batch_ready_s": [1.0, 1.1, 2.0, 2.1, 2.2, 3.0, 4.0],
        }
    )


def test_sizes_of_lists_an_arms_sizes_smallest_first() -> None:
    rounds = _rounds().iloc[::-1]
    assert sizes_of(rounds, "base") == [10, 20, 30]
    assert sizes_of(rounds, "C") == [40]
    assert sizes_of(rounds, "nobody") == []


def test_vs_baseline_pairs_each_baseline_size_with_the_other_arms_there() -> None:
    # Order of first appearance over all rounds (B before A), the baseline left out, a size with
    # no other arm kept with none, a size without the baseline (40) left out.
    assert vs_baseline(_rounds(), "base") == [(10, ["B"]), (20, ["B", "A"]), (30, [])]


def test_check_baseline_names_the_arms_when_the_baseline_has_no_rounds() -> None:
    check_baseline(_rounds(), "base", "rounds")
    with pytest.raises(UserError, match="no rounds for baseline arm 'X'") as err:
        check_baseline(_rounds(), "X", "where the time went")
    assert err.value.where == "where the time went"
    assert err.value.todo == "name one of: base, B, A, C"
