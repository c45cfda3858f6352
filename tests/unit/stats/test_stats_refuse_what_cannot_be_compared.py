"""Issue 11, items 11-13 and 17 in the stats layer: a comparison that cannot be made says so.

Same arm on both sides, a constant ratio (floating-point "variation" only), an interval on one
scale but not on the other, and savings on unbalanced blocks that must reconcile with the means
shown beside them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from abtest.errors import NO_VARIATION, TOO_SMALL, UserError
from abtest.stats import Pair, compare, compare_pair, regression_decision

BLOCKS = np.array([4.0, 4.37, 3.91, 4.13, 4.61, 3.77])


def _frame(
    base: np.ndarray, treat: np.ndarray, names: tuple[str, str] = ("b", "t")
) -> pd.DataFrame:
    n = len(base)
    return pd.DataFrame(
        {
            "arm": [names[0]] * n + [names[1]] * n,
            "size": 50,
            "block": list(range(n)) * 2,
            "batch_ready_s": np.concatenate([base, treat]),
        }
    )


# ---------------------------------------------------------------- item 11: same arm twice


def test_compare_pair_refuses_the_same_arm_on_both_sides() -> None:
    rounds = _frame(BLOCKS, BLOCKS * 0.9)
    with pytest.raises(UserError, match="same arm"):
        compare_pair(rounds, Pair("b", "b", 50, "batch_ready_s"))


def test_regression_decision_refuses_the_same_arm_on_both_sides() -> None:
    rounds = _frame(BLOCKS, BLOCKS * 0.9)
    with pytest.raises(UserError, match="same arm"):
        regression_decision(
            rounds,
            reference="t",
            candidate="t",
            size=50,
            metric="batch_ready_s",
            margin_pct=5.0,
        )


# ---------------------------------------------------------------- item 12: constant ratio


def test_constant_ratio_has_no_interval_and_no_p_value() -> None:
    # 0.9 x B is not exact in binary floating point: the per-block log ratios differ in the
    # last bits, which a plain `se > 0` took for variation (zero-width interval, p ~ 1e-47).
    (result,) = compare(_frame(BLOCKS, BLOCKS * 0.9), baseline="b", metric="batch_ready_s")
    assert result.pct_reduction == pytest.approx(10.0)
    assert result.pct_ci is None and result.ratio_ci is None
    assert result.p_value is None and result.p_adjusted is None
    assert NO_VARIATION in result.pct_note
    assert NO_VARIATION in result.note
    # The differences B - 0.9 B = 0.1 B do vary between blocks: seconds keep their interval.
    assert result.savings_ci is not None and result.savings_note == ""


def test_constant_ratio_in_welch_and_regress_too() -> None:
    unpaired = _frame(BLOCKS, BLOCKS * 1.05).drop(columns="block")
    decision = regression_decision(
        _frame(BLOCKS, BLOCKS * 1.05),
        reference="b",
        candidate="t",
        size=50,
        metric="batch_ready_s",
        margin_pct=5.0,
    )
    assert decision.slowdown_ci is None and decision.p_value is None
    assert decision.verdict == "INCONCLUSIVE" and NO_VARIATION in decision.note
    # Without blocks there is real spread within each arm: an interval is right there.
    (welch,) = compare(unpaired, baseline="b", metric="batch_ready_s")
    assert welch.method == "welch" and welch.pct_ci is not None


def test_real_but_small_variation_keeps_its_interval() -> None:
    wiggle = 1.0 + np.array([1, -1, 2, -2, 1, -1]) * 1e-5  # 10 ppm: tiny but real
    (result,) = compare(_frame(BLOCKS, BLOCKS * 0.9 * wiggle), baseline="b", metric="batch_ready_s")
    assert result.pct_ci is not None and result.p_value is not None


# ---------------------------------------------------------------- item 13: say why


def test_constant_difference_says_why_the_saving_has_no_interval() -> None:
    (result,) = compare(_frame(BLOCKS, BLOCKS - 0.3), baseline="b", metric="batch_ready_s")
    assert result.savings_ci is None
    assert NO_VARIATION in result.savings_note
    assert "saving" in result.note and NO_VARIATION in result.note
    # The log ratio varies (0.3 s is a different share of each block): percent keeps its CI.
    assert result.pct_ci is not None and result.pct_note == ""


def test_too_few_pairs_and_zero_variance_are_told_apart() -> None:
    one_pair = pd.DataFrame(
        {
            "arm": ["b", "t", "b"],
            "size": 50,
            "block": [1, 1, 2],
            "batch_ready_s": [2.0, 1.0, 2.2],
        }
    )
    (small,) = compare(one_pair, baseline="b", metric="batch_ready_s")
    assert TOO_SMALL in small.note and NO_VARIATION not in small.note
    assert "1 complete" in small.note  # the reason: the blocks do not pair up
    assert TOO_SMALL in small.savings_note and TOO_SMALL in small.pct_note
    (flat,) = compare(_frame(BLOCKS, BLOCKS * 0.9), baseline="b", metric="batch_ready_s")
    assert TOO_SMALL not in flat.note


# ---------------------------------------------------------------- item 17: means reconcile


def test_saving_reconciles_with_the_means_it_was_computed_from() -> None:
    rounds = _frame(BLOCKS, BLOCKS * 0.8 + np.array([0.01, -0.02, 0.0, 0.03, -0.01, 0.02]))
    # Unbalanced: two extra, slow baseline rounds in a block the treatment never ran.
    extra = pd.DataFrame(
        [
            {"arm": "b", "size": 50, "block": 9, "batch_ready_s": 9.0},
            {"arm": "b", "size": 50, "block": 10, "batch_ready_s": 8.0},
        ]
    )
    (result,) = compare(
        pd.concat([rounds, extra], ignore_index=True), baseline="b", metric="batch_ready_s"
    )
    assert result.method == "paired" and result.n_pairs == 6 and result.n_baseline == 8
    assert result.savings_s == pytest.approx(
        result.baseline_mean_matched - result.treatment_mean_matched
    )
    assert result.baseline_mean_matched == pytest.approx(BLOCKS.mean())
    # The all-rounds mean is still there, and differs: that is why both are shown.
    assert result.baseline_mean == pytest.approx((BLOCKS.sum() + 17.0) / 8)
    assert result.savings_s != pytest.approx(result.baseline_mean - result.treatment_mean)


def test_welch_matched_means_are_the_arm_means() -> None:
    rounds = _frame(BLOCKS, BLOCKS * 0.8).drop(columns="block")
    rounds.loc[len(rounds)] = {"arm": "b", "size": 50, "batch_ready_s": 5.0}
    (result,) = compare(rounds, baseline="b", metric="batch_ready_s")
    assert result.method == "welch"
    assert result.baseline_mean_matched == pytest.approx(result.baseline_mean)
    assert result.savings_s == pytest.approx(result.baseline_mean - result.treatment_mean)


# ---------------------------------------------------------------- item 12 in factorial effects


def test_factorial_effects_without_variation_have_no_interval() -> None:
    from abtest.stats import factorial_effects

    arms = {"base": frozenset(), "a": frozenset({"A"}), "b": frozenset({"B"})}
    arms["ab"] = frozenset({"A", "B"})
    effect = {"base": 1.0, "a": 0.9, "b": 1.2, "ab": 0.9 * 1.2}
    rows = [
        {"arm": arm, "size": 50, "block": b, "batch_ready_s": BLOCKS[b] * factor}
        for b in range(4)
        for arm, factor in effect.items()
    ]
    result = factorial_effects(
        pd.DataFrame(rows),
        arms=arms,
        factors=("A", "B"),
        metric="batch_ready_s",
        size=50,
    )
    assert result.residual_df >= 1
    for e in (*result.main, *result.interactions):
        assert e.log_ci is None and e.pct_ci is None and e.p_value is None
    assert result.main[0].pct_reduction == pytest.approx(10.0)
