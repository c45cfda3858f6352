"""Attribution (alone, marginal, non-additivity, shares) and factorial effects."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from abtest.errors import UserError
from abtest.stats import Attribution, attribution, factorial_effects, holm

METRIC = "batch_ready_s"
SIZE = 100
# Sums to zero, so every arm's mean is exact; permuted per arm so blocks still vary.
NOISE = [0.1, -0.1, 0.05, -0.05]
DRIFT = [0.0, 0.2, 0.4, 0.6]  # additive block drift, the same for every arm in a block


def _rounds(means: dict[str, float], blocks: bool = True) -> pd.DataFrame:
    rows = []
    for index, (arm, mean) in enumerate(means.items()):
        noise = NOISE[index % 4 :] + NOISE[: index % 4]
        for block, (drift, wiggle) in enumerate(zip(DRIFT, noise, strict=True)):
            row = {"arm": arm, "size": SIZE, METRIC: mean + drift + wiggle}
            if blocks:
                row["block"] = block
            rows.append(row)
    return pd.DataFrame(rows)


TWO = {"base": frozenset(), "a": frozenset({"a"}), "b": frozenset({"b"}), "ab": frozenset("ab")}
TWO_MEANS = {"base": 4.0, "a": 3.0, "b": 3.5, "ab": 2.0}


def _attribute(
    rounds: pd.DataFrame, arms: dict[str, frozenset[str]], factors: list[str]
) -> Attribution:
    return attribution(
        rounds, arms=arms, factors=factors, baseline="base", metric=METRIC, size=SIZE
    )


def test_two_factor_full_factorial_by_hand() -> None:
    result = _attribute(_rounds(TWO_MEANS), TWO, ["a", "b"])
    a, b = result.factors
    assert result.share_method == "shapley"
    assert result.combined_arm == "ab"
    assert result.combined is not None and result.combined.savings_s == pytest.approx(2.0)
    assert a.alone is not None and a.alone.savings_s == pytest.approx(1.0)
    assert b.alone is not None and b.alone.savings_s == pytest.approx(0.5)
    # Marginal: what a adds on top of b (b - ab), and b on top of a (a - ab).
    assert a.marginal is not None and a.marginal.savings_s == pytest.approx(1.5)
    assert b.marginal is not None and b.marginal.savings_s == pytest.approx(1.0)
    assert (a.leave_one_out_arm, b.leave_one_out_arm) == ("b", "a")
    # Shapley: a = (1.0 + 1.5) / 2, b = (0.5 + 1.0) / 2; they add up to the combined 2.0.
    assert (a.share_s, b.share_s) == pytest.approx((1.25, 0.75))
    assert (a.share_pct, b.share_pct) == pytest.approx((62.5, 37.5))
    assert a.share_ci is not None and a.share_ci[0] < 1.25 < a.share_ci[1]
    # Non-additivity: 2.0 - (1.0 + 0.5) = 0.5 (synergy).
    na = result.non_additivity
    assert na is not None
    assert (na.combined_saving_s, na.sum_of_singles_s, na.excess_s) == pytest.approx(
        (2.0, 1.5, 0.5)
    )
    assert na.method == "paired"


def test_non_additivity_paired_matches_scipy() -> None:
    rounds = _rounds(TWO_MEANS)
    result = _attribute(rounds, TWO, ["a", "b"])
    by_arm = {arm: rounds[rounds.arm == arm].sort_values("block")[METRIC].to_numpy() for arm in TWO}
    per_block = by_arm["a"] + by_arm["b"] - by_arm["ab"] - by_arm["base"]
    reference = sps.ttest_1samp(per_block, 0.0)
    ci = reference.confidence_interval(0.95)
    na = result.non_additivity
    assert na is not None and na.excess_ci is not None
    assert na.excess_ci == pytest.approx((ci.low, ci.high))
    assert na.p_value == pytest.approx(reference.pvalue)


def test_non_additivity_without_blocks_is_welch_contrast() -> None:
    rounds = _rounds(TWO_MEANS, blocks=False)
    result = _attribute(rounds, TWO, ["a", "b"])
    na = result.non_additivity
    assert na is not None and na.method == "welch" and na.excess_ci is not None
    coefficients = {"a": 1.0, "b": 1.0, "ab": -1.0, "base": -1.0}
    weights = [
        c**2 * rounds[rounds.arm == arm][METRIC].var(ddof=1) / 4 for arm, c in coefficients.items()
    ]
    se = math.sqrt(sum(weights))
    df = sum(weights) ** 2 / sum(w**2 / 3 for w in weights)
    half = sps.t.ppf(0.975, df) * se
    assert na.excess_s == pytest.approx(0.5)
    assert na.excess_ci == pytest.approx((0.5 - half, 0.5 + half))


def _brute_force_shapley(
    means: dict[frozenset[str], float], factors: list[str]
) -> dict[str, float]:
    totals = dict.fromkeys(factors, 0.0)
    orders = list(itertools.permutations(factors))
    for order in orders:
        on: frozenset[str] = frozenset()
        for factor in order:
            totals[factor] += means[on] - means[on | {factor}]
            on = on | {factor}
    return {f: t / len(orders) for f, t in totals.items()}


def test_shapley_matches_brute_force_over_orders() -> None:
    factors = ["x", "y", "z"]
    rng = np.random.default_rng(5)
    subsets = [frozenset(c) for r in range(4) for c in itertools.combinations(factors, r)]
    arms = {("base" if not s else "".join(sorted(s))): s for s in subsets}
    rows = [
        {"arm": name, "size": SIZE, METRIC: float(value)}
        for name in arms
        for value in rng.lognormal(np.log(5.0) - 0.3 * len(arms[name]), 0.1, 3)
    ]
    rounds = pd.DataFrame(rows)
    result = attribution(
        rounds, arms=arms, factors=factors, baseline="base", metric=METRIC, size=SIZE
    )
    means = {s: rounds[rounds.arm == name][METRIC].mean() for name, s in arms.items()}
    expected = _brute_force_shapley(means, factors)
    assert result.share_method == "shapley"
    assert [f.share_s for f in result.factors] == pytest.approx([expected[f] for f in factors])
    assert sum(f.share_s or 0.0 for f in result.factors) == pytest.approx(
        means[frozenset()] - means[frozenset(factors)]
    )
    assert sum(f.share_pct or 0.0 for f in result.factors) == pytest.approx(100.0)


def test_singles_and_combined_only_gives_labelled_approximation() -> None:
    arms = {
        "base": frozenset(),
        "x": frozenset({"x"}),
        "y": frozenset({"y"}),
        "z": frozenset({"z"}),
        "all": frozenset("xyz"),
    }
    means = {"base": 5.0, "x": 4.0, "y": 4.5, "z": 5.0, "all": 3.0}
    result = _attribute(_rounds(means), arms, ["x", "y", "z"])
    assert result.share_method == "approximate"
    assert "approximate" in result.note
    x, y, z = result.factors
    # Only alone savings exist (1.0, 0.5, 0.0): normalised to the combined 2.0.
    assert (x.share_s, y.share_s, z.share_s) == pytest.approx((2.0 * 1 / 1.5, 2.0 * 0.5 / 1.5, 0.0))
    assert (x.share_pct, y.share_pct) == pytest.approx((100 / 1.5, 50 / 1.5))
    assert all(f.share_ci is None and f.marginal is None for f in result.factors)
    na = result.non_additivity
    assert na is not None and na.excess_s == pytest.approx(2.0 - 1.5)


def test_leave_one_out_design_averages_alone_and_marginal() -> None:
    factors = ["p", "q", "r", "s"]
    arms: dict[str, frozenset[str]] = {"base": frozenset(), "all": frozenset(factors)}
    means = {"base": 6.0, "all": 3.0}
    for index, f in enumerate(factors):
        arms[f] = frozenset({f})
        means[f] = 6.0 - 0.5 * (index + 1) / 2
        arms[f"no-{f}"] = frozenset(factors) - {f}
        means[f"no-{f}"] = 3.0 + 0.25 * (index + 1)
    result = _attribute(_rounds(means), arms, factors)
    assert result.share_method == "approximate"
    averages = [((0.5 * (i + 1) / 2) + 0.25 * (i + 1)) / 2 for i in range(4)]
    expected = [a / sum(averages) * 3.0 for a in averages]
    assert [f.share_s for f in result.factors] == pytest.approx(expected)
    assert all(f.marginal is not None for f in result.factors)
    # Holm across the four alone comparisons (one table).
    alone = [f.alone for f in result.factors if f.alone is not None]
    assert len(alone) == 4
    assert [c.p_adjusted for c in alone] == pytest.approx(holm([c.p_value for c in alone]))


def test_without_combined_arm_there_are_no_shares() -> None:
    arms = {"base": frozenset(), "a": frozenset({"a"}), "b": frozenset({"b"})}
    means = {"base": 4.0, "a": 3.0, "b": 3.5}
    result = _attribute(_rounds(means), arms, ["a", "b"])
    assert result.share_method == "unavailable"
    assert result.combined is None and result.non_additivity is None
    assert all(f.share_s is None for f in result.factors)
    assert result.factors[0].alone is not None


def test_one_factor_owns_the_whole_saving() -> None:
    arms = {"base": frozenset(), "a": frozenset({"a"})}
    result = _attribute(_rounds({"base": 4.0, "a": 3.0}), arms, ["a"])
    assert result.share_method == "shapley"
    assert result.factors[0].share_pct == pytest.approx(100.0)
    assert result.non_additivity is None


def test_attribution_rejects_inconsistent_arms() -> None:
    rounds = _rounds(TWO_MEANS)
    with pytest.raises(UserError, match="not in the factors"):
        _attribute(rounds, {**TWO, "ab": frozenset({"a", "zz"})}, ["a", "b"])
    with pytest.raises(UserError, match="same factors"):
        _attribute(rounds, {**TWO, "b": frozenset({"a"})}, ["a", "b"])
    with pytest.raises(UserError, match="baseline"):
        _attribute(rounds, {**TWO, "base": frozenset({"a"})}, ["a", "b"])


# ---------------------------------------------------------------- factorial effects


def _factorial_rounds(
    arms: dict[str, frozenset[str]],
    log_model: dict[tuple[str, ...], float],
    factors: list[str],
    rounds_per_arm: int,
    seed: int,
    blocks: bool,
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    block_shift = rng.normal(0.0, 0.2, rounds_per_arm)
    rows = []
    for name, on in arms.items():
        x = {f: 1.0 if f in on else -1.0 for f in factors}
        mean = math.log(4.0) + sum(
            b * math.prod(x[f] for f in term) for term, b in log_model.items()
        )
        for r in range(rounds_per_arm):
            row = {"arm": name, "size": SIZE}
            shift = block_shift[r] if blocks else 0.0
            row[METRIC] = math.exp(mean + shift + rng.normal(0.0, 0.02))
            if blocks:
                row["block"] = r
            rows.append(row)
    return pd.DataFrame(rows)


def _full_factorial(factors: list[str]) -> dict[str, frozenset[str]]:
    subsets = [
        frozenset(c) for r in range(len(factors) + 1) for c in itertools.combinations(factors, r)
    ]
    return {("base" if not s else "+".join(sorted(s))): s for s in subsets}


def test_factorial_recovers_main_effects_and_interaction() -> None:
    factors = ["a", "b", "c"]
    arms = _full_factorial(factors)
    model = {("a",): -0.1, ("b",): 0.0, ("c",): -0.05, ("a", "b"): 0.04}
    rounds = _factorial_rounds(arms, model, factors, rounds_per_arm=3, seed=6, blocks=True)
    result = factorial_effects(rounds, arms=arms, factors=factors, metric=METRIC, size=SIZE)
    assert result.blocked and result.n_rounds == 24
    assert result.residual_df == 24 - (1 + 3 + 3 + 2)
    effects = {e.term: e for e in (*result.main, *result.interactions)}
    for term in [("a",), ("b",), ("c",), ("a", "b"), ("a", "c"), ("b", "c")]:
        truth = 2 * model.get(term, 0.0)
        effect = effects[term]
        assert effect.log_ci is not None
        assert effect.log_effect == pytest.approx(truth, abs=0.03)
        assert effect.log_ci[0] - 0.01 < truth < effect.log_ci[1] + 0.01
    a = effects[("a",)]
    assert a.pct_reduction == pytest.approx((1 - math.exp(a.log_effect)) * 100)
    assert a.pct_reduction > 0 and a.p_value is not None and a.p_value < 0.001


def test_one_factor_main_effect_is_the_pooled_t_on_logs() -> None:
    arms = {"off": frozenset(), "on": frozenset({"a"})}
    rng = np.random.default_rng(8)
    off, on = rng.lognormal(1.0, 0.1, 5), rng.lognormal(0.9, 0.1, 7)
    rounds = pd.DataFrame(
        {"arm": ["off"] * 5 + ["on"] * 7, "size": SIZE, METRIC: np.concatenate([off, on])}
    )
    (effect,) = factorial_effects(
        rounds, arms=arms, factors=["a"], metric=METRIC, size=SIZE, confidence=0.9
    ).main
    reference = sps.ttest_ind(np.log(on), np.log(off), equal_var=True)
    ci = reference.confidence_interval(0.9)
    assert effect.log_effect == pytest.approx(np.log(on).mean() - np.log(off).mean())
    assert effect.log_ci == pytest.approx((ci.low, ci.high))
    assert effect.p_value == pytest.approx(reference.pvalue)


def test_resolution_v_fraction_estimates_two_factor_interactions() -> None:
    factors = ["a", "b", "c", "d", "e"]
    arms = {}
    for signs in itertools.product([-1, 1], repeat=4):
        levels = [*signs, math.prod(signs)]  # E = ABCD: resolution V
        on = frozenset(f for f, s in zip(factors, levels, strict=True) if s > 0)
        arms["+".join(sorted(on)) or "base"] = on
    model = {("a",): -0.1, ("e",): -0.05, ("b", "e"): 0.03}
    rounds = _factorial_rounds(arms, model, factors, rounds_per_arm=2, seed=9, blocks=False)
    result = factorial_effects(rounds, arms=arms, factors=factors, metric=METRIC, size=SIZE)
    assert result.note == ""
    assert len(result.main) == 5 and len(result.interactions) == 10
    effects = {e.term: e.log_effect for e in (*result.main, *result.interactions)}
    assert effects[("b", "e")] == pytest.approx(0.06, abs=0.03)
    assert effects[("a",)] == pytest.approx(-0.2, abs=0.03)


def test_resolution_iv_fraction_falls_back_to_main_effects() -> None:
    factors = ["a", "b", "c", "d"]
    arms = {}
    for signs in itertools.product([-1, 1], repeat=3):
        levels = [*signs, math.prod(signs)]  # D = ABC: two-factor interactions aliased
        on = frozenset(f for f, s in zip(factors, levels, strict=True) if s > 0)
        arms["+".join(sorted(on)) or "base"] = on
    rounds = _factorial_rounds(
        arms, {("a",): -0.1}, factors, rounds_per_arm=2, seed=10, blocks=False
    )
    result = factorial_effects(rounds, arms=arms, factors=factors, metric=METRIC, size=SIZE)
    assert "aliased" in result.note
    assert len(result.main) == 4 and result.interactions == ()


def test_factorial_rejects_a_design_that_cannot_separate_factors() -> None:
    arms = {"base": frozenset(), "ab": frozenset("ab")}
    rounds = _rounds({"base": 4.0, "ab": 3.0})
    with pytest.raises(UserError, match="cannot separate"):
        factorial_effects(rounds, arms=arms, factors=["a", "b"], metric=METRIC, size=SIZE)


def test_no_share_percentages_of_a_combined_saving_that_may_be_zero() -> None:
    # the lab's 100-pod run: combined +0.2 [-2.1, 2.5] s printed shares of 775 % and -675 %
    rng = np.random.default_rng(5)
    arms = {
        "base": frozenset(),
        "x": frozenset({"x"}),
        "y": frozenset({"y"}),
        "all": frozenset("xy"),
    }
    means = {"base": 19.2, "x": 18.7, "y": 21.6, "all": 19.0}
    rounds = _rounds(means)
    rounds["batch_ready_s"] = rounds["batch_ready_s"] * np.exp(rng.normal(0, 0.08, len(rounds)))
    result = _attribute(rounds, arms, ["x", "y"])
    assert result.combined is not None and result.combined.savings_ci is not None
    lo, hi = result.combined.savings_ci
    assert lo <= 0 <= hi
    assert all(f.share_pct is None for f in result.factors)
    assert all(f.share_s is not None for f in result.factors)
    assert "no share in %" in result.note
