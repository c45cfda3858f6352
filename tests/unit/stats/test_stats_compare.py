"""compare(), the interval core and nearest-rank percentiles: hand values and scipy references."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from abtest.errors import UserError
from abtest.stats import (
    Pair,
    compare,
    compare_pair,
    holm,
    nearest_rank,
    one_sample_t,
    uncomparable,
    welch_contrast,
    welch_t,
)
from abtest.stats.intervals import pct_reduction_ci, ratio_and_pct_ci

# ---------------------------------------------------------------- nearest rank


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5, 1, 3, 2, 4], 50, 3),  # rank ceil(2.5) = 3
        ([5, 1, 3, 2, 4], 100, 5),
        ([5, 1, 3, 2, 4], 1, 1),  # rank ceil(0.05) = 1
        ([5, 1, 3, 2, 4], 20, 1),  # rank exactly 1
        ([5, 1, 3, 2, 4], 21, 2),
        ([7.5], 50, 7.5),  # one value is every percentile
        ([7.5], 99, 7.5),
        ([1, 2, 2, 2, 9], 60, 2),  # ties: rank 3 of 1,2,2,2,9
        ([1, 2, 2, 2, 9], 81, 9),
        (list(range(1, 101)), 95, 95),  # 0.95 * 100 is 95.000...01 in floats: must not be 96
        (list(range(1, 151)), 95, 143),  # 150 pods: ceil(142.5)
        (list(range(1, 151)), 50, 75),
        (list(range(1, 151)), 99, 149),  # ceil(148.5)
    ],
)
def test_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert nearest_rank(values, q) == expected


@pytest.mark.parametrize("q", [0, -1, 100.5, float("nan")])
def test_nearest_rank_rejects_q_outside_0_100(q: float) -> None:
    with pytest.raises(UserError):
        nearest_rank([1.0, 2.0], q)


def test_nearest_rank_rejects_empty_and_nan() -> None:
    with pytest.raises(UserError):
        nearest_rank([], 50)
    with pytest.raises(UserError):
        nearest_rank([1.0, float("nan")], 50)


# ---------------------------------------------------------------- Holm


def test_holm_hand_example() -> None:
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_skips_missing_and_caps_at_one() -> None:
    assert holm([0.01, None, 0.04]) == [pytest.approx(0.02), None, pytest.approx(0.04)]
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    assert holm([0.2]) == [0.2]


# ---------------------------------------------------------------- t core vs scipy


def test_one_sample_t_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    data = rng.normal(0.3, 1.0, size=7)
    ours = one_sample_t(data, 0.9)
    ref = sps.ttest_1samp(data, 0.0)
    ci = ref.confidence_interval(0.9)
    assert float(ours.p_value) == pytest.approx(ref.pvalue, rel=1e-12)
    assert (float(ours.lo), float(ours.hi)) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_welch_matches_scipy_and_is_vectorised() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(1.0, 1.0, size=(3, 6))
    y = rng.normal(0.0, 2.5, size=(3, 9))
    ours = welch_t(x, y, 0.95)
    for row in range(3):
        ref = sps.ttest_ind(x[row], y[row], equal_var=False)
        ci = ref.confidence_interval(0.95)
        assert ours.p_value[row] == pytest.approx(ref.pvalue, rel=1e-10)
        assert ours.lo[row] == pytest.approx(ci.low, rel=1e-10)
        assert ours.hi[row] == pytest.approx(ci.high, rel=1e-10)


def test_welch_contrast_three_groups_by_hand() -> None:
    means, variances, counts = [1.0, 2.0, 4.0], [1.0, 4.0, 9.0], [4, 5, 10]
    coefficients = [1.0, 1.0, -1.0]
    ours = welch_contrast(means, variances, counts, coefficients, 0.95)
    weights = [1.0 / 4, 4.0 / 5, 9.0 / 10]
    se = math.sqrt(sum(weights))
    df = sum(weights) ** 2 / sum(w**2 / (n - 1) for w, n in zip(weights, counts, strict=True))
    half = sps.t.ppf(0.975, df) * se
    assert float(ours.estimate) == pytest.approx(-1.0)
    assert float(ours.se) == pytest.approx(se)
    assert float(ours.df) == pytest.approx(df)
    assert (float(ours.lo), float(ours.hi)) == pytest.approx((-1.0 - half, -1.0 + half))


def test_ratio_and_pct_ci_from_a_log_ratio_interval() -> None:
    # log(T/B) in [log 0.8, log 0.9]: the ratio in [0.8, 0.9], the reduction in [10 %, 20 %]
    # (a higher ratio is a smaller reduction: the bounds swap); no interval, neither.
    ratio_ci, pct_ci = ratio_and_pct_ci((math.log(0.8), math.log(0.9)))
    assert ratio_ci == pytest.approx((0.8, 0.9))
    assert pct_ci == pytest.approx((10.0, 20.0))
    assert pct_reduction_ci((math.log(0.8), math.log(0.9))) == pct_ci
    assert ratio_and_pct_ci(None) == (None, None)


# ---------------------------------------------------------------- compare()


def _paired_example() -> pd.DataFrame:
    """Four blocks; treat halves or quarters the time, other is +-10 %."""
    base = [2.0, 2.0, 4.0, 4.0]
    treat = [1.0, 1.5, 2.0, 3.0]
    other = [2.2, 1.8, 4.4, 3.6]
    rows = []
    for arm, values in (("baseline", base), ("treat", treat), ("other", other)):
        for block, value in enumerate(values, start=1):
            rows.append({"arm": arm, "size": 50, "block": block, "batch_ready_s": value})
    return pd.DataFrame(rows)


def test_compare_paired_hand_numbers() -> None:
    rounds = _paired_example()
    treat, other = compare(rounds, baseline="baseline", metric="batch_ready_s")
    assert (treat.arm, other.arm) == ("treat", "other")
    assert treat.method == "paired" and treat.n_pairs == 4
    assert (treat.n_baseline, treat.n_treatment) == (4, 4)
    assert treat.baseline_mean == pytest.approx(3.0)
    assert treat.treatment_mean == pytest.approx(1.875)
    assert treat.baseline_median == pytest.approx(3.0)
    assert treat.treatment_median == pytest.approx(1.75)
    assert treat.savings_s == pytest.approx(1.125)
    # Differences 1, .5, 2, 1: sd sqrt(1.1875 / 3), t(0.975, 3) = 3.182446.
    half = 3.182446305 * math.sqrt(1.1875 / 3) / 2
    assert treat.savings_ci == pytest.approx((1.125 - half, 1.125 + half))
    # Geometric means sqrt(8) and 9**0.25: ratio sqrt(0.375).
    assert treat.ratio == pytest.approx(math.sqrt(0.375))
    assert treat.pct_reduction == pytest.approx((1 - math.sqrt(0.375)) * 100)
    assert treat.pct_reduction_arithmetic == pytest.approx(37.5)
    log_half = 3.182446305 * (math.log(1.5) / 2) * math.sqrt(4 / 3) / 2
    centre = math.log(math.sqrt(0.375))
    expected_pct = (
        (1 - math.exp(centre + log_half)) * 100,
        (1 - math.exp(centre - log_half)) * 100,
    )
    assert treat.pct_ci == pytest.approx(expected_pct)
    assert treat.pct_ci == pytest.approx((11.123, 57.807), abs=1e-3)


def test_compare_paired_matches_scipy_ttest_rel() -> None:
    rounds = _paired_example()
    base = np.array([2.0, 2.0, 4.0, 4.0])
    for comparison in compare(rounds, baseline="baseline", metric="batch_ready_s"):
        arm = rounds[rounds.arm == comparison.arm].sort_values("block")
        treat = arm.batch_ready_s.to_numpy()
        on_logs = sps.ttest_rel(np.log(treat), np.log(base))
        assert comparison.p_value == pytest.approx(on_logs.pvalue, rel=1e-10)
        log_ci = on_logs.confidence_interval(0.95)
        assert comparison.ratio_ci == pytest.approx((np.exp(log_ci.low), np.exp(log_ci.high)))
        on_seconds = sps.ttest_rel(base, treat).confidence_interval(0.95)
        assert comparison.savings_ci == pytest.approx((on_seconds.low, on_seconds.high))


def test_compare_holm_within_table() -> None:
    treat, other = compare(_paired_example(), baseline="baseline", metric="batch_ready_s")
    assert treat.p_value is not None and other.p_value is not None
    assert [treat.p_adjusted, other.p_adjusted] == pytest.approx(
        holm([treat.p_value, other.p_value])
    )
    assert treat.p_adjusted == pytest.approx(2 * treat.p_value)


def test_compare_welch_without_blocks_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    base = np.exp(rng.normal(np.log(4.0), 0.1, 6))
    treat = np.exp(rng.normal(np.log(3.0), 0.2, 5))
    rounds = pd.DataFrame(
        {
            "arm": ["baseline"] * 6 + ["treat"] * 5,
            "size": 100,
            "p95_s": np.concatenate([base, treat]),
        }
    )
    (result,) = compare(rounds, baseline="baseline", metric="p95_s", confidence=0.9)
    assert result.method == "welch" and result.n_pairs == 0
    on_logs = sps.ttest_ind(np.log(treat), np.log(base), equal_var=False)
    assert result.p_value == pytest.approx(on_logs.pvalue, rel=1e-10)
    log_ci = on_logs.confidence_interval(0.9)
    assert result.pct_ci == pytest.approx(
        ((1 - np.exp(log_ci.high)) * 100, (1 - np.exp(log_ci.low)) * 100)
    )
    on_seconds = sps.ttest_ind(base, treat, equal_var=False).confidence_interval(0.9)
    assert result.savings_ci == pytest.approx((on_seconds.low, on_seconds.high))
    assert result.savings_s == pytest.approx(base.mean() - treat.mean())
    assert result.pct_reduction == pytest.approx(
        (1 - np.exp(np.log(treat).mean() - np.log(base).mean())) * 100
    )


def test_compare_one_table_per_size() -> None:
    rounds = pd.concat(
        [
            _paired_example(),
            _paired_example().assign(size=150, batch_ready_s=lambda f: f.batch_ready_s * 3),
        ]
    )
    results = compare(rounds, baseline="baseline", metric="batch_ready_s")
    assert [(c.size, c.arm) for c in results] == [
        (50, "treat"),
        (50, "other"),
        (150, "treat"),
        (150, "other"),
    ]
    # Scaling every time by 3 changes seconds but not ratios.
    assert results[2].pct_ci == pytest.approx(results[0].pct_ci)
    assert results[2].savings_s == pytest.approx(3 * results[0].savings_s)


def test_n_too_small_gives_no_interval() -> None:
    rounds = pd.DataFrame(
        {"arm": ["baseline", "treat"], "size": [50, 50], "batch_ready_s": [2.0, 1.0]}
    )
    (result,) = compare(rounds, baseline="baseline", metric="batch_ready_s")
    assert result.savings_s == pytest.approx(1.0)
    assert result.pct_reduction == pytest.approx(50.0)
    assert result.savings_ci is None and result.pct_ci is None
    assert result.p_value is None and result.p_adjusted is None
    assert result.method == "none"
    assert "n too small" in result.note


def test_one_block_with_blocks_is_too_small() -> None:
    rounds = pd.DataFrame(
        {
            "arm": ["baseline", "treat", "baseline"],
            "size": 50,
            "block": [1, 1, 2],
            "batch_ready_s": [2.0, 1.0, 2.2],
        }
    )
    (result,) = compare(rounds, baseline="baseline", metric="batch_ready_s")
    assert result.pct_ci is None and result.p_value is None
    assert "n too small" in result.note


def test_blocks_that_do_not_pair_fall_back_to_welch() -> None:
    rounds = pd.DataFrame(
        {
            "arm": ["baseline", "baseline", "treat", "treat"],
            "size": 50,
            "block": [1, 2, 3, 4],
            "batch_ready_s": [2.0, 2.2, 1.0, 1.2],
        }
    )
    (result,) = compare(rounds, baseline="baseline", metric="batch_ready_s")
    assert result.method == "welch"
    assert "do not pair" in result.note
    assert result.pct_ci is not None


def test_incomplete_block_is_left_out_and_repeats_averaged() -> None:
    rounds = _paired_example()
    rounds = rounds[~((rounds.arm == "treat") & (rounds.block == 4))]
    repeat = pd.DataFrame([{"arm": "treat", "size": 50, "block": 1, "batch_ready_s": 1.2}])
    rounds = pd.concat([rounds, repeat], ignore_index=True)
    result = compare_pair(rounds, Pair("baseline", "treat", 50, "batch_ready_s"))
    assert result.n_pairs == 3 and result.n_treatment == 4
    assert "left out" in result.note and "averaged" in result.note
    # Block 1: treat averages (1.0 + 1.2) / 2 = 1.1; differences 0.9, 0.5, 2.0.
    assert result.savings_s == pytest.approx((0.9 + 0.5 + 2.0) / 3)


def test_zero_variation_gives_no_interval() -> None:
    rounds = pd.DataFrame(
        {
            "arm": ["baseline", "baseline", "treat", "treat"],
            "size": 50,
            "block": [1, 2, 1, 2],
            # ratio exactly 0.5 in both blocks; times off any coarse grid (on a whole-second
            # grid a constant ratio is rounding's, and gets the rounding's interval, below)
            "batch_ready_s": [2.0137, 4.0274, 1.00685, 2.0137],
        }
    )
    (result,) = compare(rounds, baseline="baseline", metric="batch_ready_s")
    assert result.pct_reduction == pytest.approx(50.0)
    assert result.pct_ci is None and result.p_value is None
    assert "no variation" in result.note


def test_a_constant_ratio_on_a_whole_second_grid_gets_the_roundings_interval() -> None:
    rounds = pd.DataFrame(
        {
            "arm": ["baseline"] * 3 + ["treat"] * 3,
            "size": 50,
            "block": [1, 2, 3] * 2,
            "batch_ready_s": [6.0, 5.0, 5.0, 7.0, 6.0, 6.0],  # the issue-37 example
        }
    )
    (result,) = compare(rounds, baseline="baseline", metric="batch_ready_s")
    assert result.pct_ci is not None and "1 s grid" in result.note
    # the plain t gave a reduction of [-25.7, -8.6] %: rounding alone spreads it far wider
    assert result.pct_ci[0] < -30.0 and result.pct_ci[1] > 0.0


def test_p_value_agrees_with_pct_interval() -> None:
    rng = np.random.default_rng(4)
    for trial in range(200):
        n = 5
        block = rng.normal(0, 0.2, n)
        base = np.exp(1.0 + block + rng.normal(0, 0.1, n))
        treat = np.exp(1.0 + block + rng.normal(-0.08, 0.1, n))
        rounds = pd.DataFrame(
            {
                "arm": ["baseline"] * n + ["treat"] * n,
                "size": 50,
                "block": list(range(n)) * 2,
                "batch_ready_s": np.concatenate([base, treat]),
            }
        )
        (result,) = compare(rounds, baseline="baseline", metric="batch_ready_s")
        assert result.pct_ci is not None and result.p_value is not None
        excludes_zero = result.pct_ci[0] > 0 or result.pct_ci[1] < 0
        assert excludes_zero == (result.p_value < 0.05), trial
        assert result.pct_ci[0] <= result.pct_reduction <= result.pct_ci[1]


def test_uncomparable_lists_sizes_without_baseline() -> None:
    rounds = pd.concat(
        [
            _paired_example(),
            pd.DataFrame([{"arm": "treat", "size": 100, "block": 1, "batch_ready_s": 3.0}]),
        ]
    )
    assert uncomparable(rounds, baseline="baseline") == [("treat", 100)]
    assert all(c.size == 50 for c in compare(rounds, baseline="baseline", metric="batch_ready_s"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch_ready_s": 0.0}, "positive"),
        ({"batch_ready_s": -1.0}, "positive"),
        ({"batch_ready_s": float("nan")}, "positive"),
    ],
)
def test_compare_rejects_bad_times(change: dict[str, float], message: str) -> None:
    rounds = _paired_example()
    for column, value in change.items():
        rounds.loc[0, column] = value
    with pytest.raises(UserError, match=message):
        compare(rounds, baseline="baseline", metric="batch_ready_s")


def test_compare_rejects_bad_arguments() -> None:
    rounds = _paired_example()
    with pytest.raises(UserError, match="baseline"):
        compare(rounds, baseline="nope", metric="batch_ready_s")
    with pytest.raises(UserError, match="no column"):
        compare(rounds, baseline="baseline", metric="p99_s")
    with pytest.raises(UserError, match="confidence"):
        compare(rounds, baseline="baseline", metric="batch_ready_s", confidence=95)
