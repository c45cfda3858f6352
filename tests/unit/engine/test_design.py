"""Designs: arm sets, naming, deduplication, and the fractional factorials' resolution."""

from __future__ import annotations

import itertools
import math

import pytest

from abtest.config.domain import Factor
from abtest.engine.design import (
    DESIGNS,
    FRACTIONS,
    LETTERS,
    arm_name,
    build_arms,
    defining_relation,
    factorial_matrix,
    full_factorial,
    gates_all,
    resolution,
)
from abtest.errors import UserError

AGC = [
    "KubeletQOSCgroupUpdateCoalescing",
    "KubeletParallelPodStatusSync",
    "KubeletPodStatusRetry",
    "KubeletSystemdCgroupCreateWithResources",
    "KubeletCgroupControllerReuse",
    "PLEGOnDemandRelist",
]


def gates(k: int) -> list[Factor]:
    return [Factor(f"Gate{LETTERS[i]}", "feature_gate", True, False, "s") for i in range(k)]


def qps() -> Factor:
    return Factor("kubeAPIQPS", "config_field", 50, 5, "client QPS")


# --------------------------------------------------------------------------- simple designs


def test_baseline_sets_every_factor_off_explicitly() -> None:
    factors = [*gates(2), qps()]
    (arm,) = build_arms(factors, "baseline")
    assert arm.name == "baseline"
    assert arm.on == frozenset()
    assert arm.settings == (
        ("featureGates.GateA", False),
        ("featureGates.GateB", False),
        ("kubeAPIQPS", 5),
    )


def test_singles_turn_exactly_one_factor_on() -> None:
    factors = [*gates(3), qps()]
    arms = build_arms(factors, "singles")
    assert [a.name for a in arms] == ["+GateA", "+GateB", "+GateC", "+kubeAPIQPS"]
    for arm, f in zip(arms, factors, strict=True):
        assert arm.on == {f.name}
        s = arm.settings_dict()
        assert set(s) == {g.path for g in factors}
        assert all(s[g.path] == (g.on if g is f else g.off) for g in factors)


def test_combined_and_leave_one_out() -> None:
    factors = gates(4)
    (comb,) = build_arms(factors, "combined")
    assert comb.name == "combined"
    assert comb.on == {f.name for f in factors}
    assert all(v is True for _, v in comb.settings)
    loo = build_arms(factors, "leave-one-out")
    assert [a.name for a in loo] == [f"combined-{f.name}" for f in factors]
    for arm, f in zip(loo, factors, strict=True):
        assert arm.on == comb.on - {f.name}
        assert arm.settings_dict()[f.path] is False


def test_gates_all_counts_and_names() -> None:
    factors = [Factor(n, "feature_gate", True, False, "") for n in AGC]
    arms = gates_all(factors, attribution=False)
    assert len(arms) == 1 + 6 + 1
    assert arms[0].name == "baseline" and arms[-1].name == "combined"
    with_attr = gates_all(factors, attribution=True)
    assert len(with_attr) == 1 + 6 + 1 + 6
    assert with_attr[-1].name == "combined-PLEGOnDemandRelist"
    assert len({a.name for a in with_attr}) == len(with_attr)
    assert len({a.on for a in with_attr}) == len(with_attr)


def test_gates_all_dedupes_one_factor() -> None:
    arms = gates_all(gates(1), attribution=True)
    # single == combined, leave-one-out == baseline
    assert [(a.name, set(a.on)) for a in arms] == [("baseline", set()), ("+GateA", {"GateA"})]


def test_gates_all_dedupes_two_factors() -> None:
    arms = gates_all(gates(2), attribution=True)
    # leave-one-out arms are the singles
    assert [a.name for a in arms] == ["baseline", "+GateA", "+GateB", "combined"]


def test_naming_is_the_same_in_every_design() -> None:
    factors = gates(5)
    by_on = {a.on: a for a in gates_all(factors, attribution=True)}
    fact = build_arms(factors, "factorial")
    shared = [a for a in fact if a.on in by_on]
    assert shared, "the factorial shares configurations with gates --all"
    for a in shared:
        assert a == by_on[a.on]
    assert arm_name({"GateA", "GateC"}, factors) == "+GateA+GateC"
    assert arm_name({"GateC", "GateA"}, factors) == "+GateA+GateC"  # catalog order
    with pytest.raises(ValueError):
        arm_name({"Nope"}, factors)


@pytest.mark.parametrize("design", DESIGNS)
def test_every_design_gives_unique_names(design: str) -> None:
    arms = build_arms(gates(6), design)
    assert len({a.name for a in arms}) == len(arms)


def test_invalid_inputs() -> None:
    with pytest.raises(UserError, match="unknown design") as err:
        build_arms(gates(2), "halfnormal")
    assert err.value.todo and "factorial" in err.value.todo
    with pytest.raises(UserError, match="no factors"):
        build_arms([], "singles")
    with pytest.raises(UserError, match="listed twice"):
        build_arms([*gates(1), *gates(1)], "singles")
    clash = Factor("featureGates.GateA", "config_field", True, False, "")
    with pytest.raises(UserError, match="same path"):
        build_arms([*gates(1), clash], "singles")
    with pytest.raises(UserError, match="no factorial design for 12"):
        build_arms([*gates(11), Factor("X", "feature_gate", True, False, "")], "factorial")


# --------------------------------------------------------------------------- factorials


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_full_factorial_for_small_k(k: int) -> None:
    arms = build_arms(gates(k), "factorial")
    assert len(arms) == 2**k
    names = [f.name for f in gates(k)]
    all_subsets = {frozenset(c) for r in range(k + 1) for c in itertools.combinations(names, r)}
    assert {a.on for a in arms} == all_subsets
    assert arms[0].name == "baseline"
    assert resolution(factorial_matrix(k)) == k + 1  # no aliasing at all


def effect_columns(matrix: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[int]]:
    """Columns of the intercept, every main effect and every two-factor interaction."""
    k = len(matrix[0])
    cols: dict[tuple[int, ...], list[int]] = {(): [1] * len(matrix)}
    for i in range(k):
        cols[(i,)] = [row[i] for row in matrix]
    for i, j in itertools.combinations(range(k), 2):
        cols[(i, j)] = [row[i] * row[j] for row in matrix]
    return cols


def aliased_pairs(matrix: list[tuple[int, ...]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    cols = effect_columns(matrix)
    return [
        (a, b)
        for a, b in itertools.combinations(cols, 2)
        if sum(x * y for x, y in zip(cols[a], cols[b], strict=True)) != 0
    ]


@pytest.mark.parametrize("k", sorted(FRACTIONS))
def test_fractional_factorial_is_resolution_v_or_more(k: int) -> None:
    frac = FRACTIONS[k]
    matrix = factorial_matrix(k)
    assert len(matrix) == frac.runs == 2 ** (k - frac.p)
    assert len(set(matrix)) == len(matrix)
    assert resolution(matrix) == frac.resolution >= 5
    # each generator is a word of the defining relation (with its generated letter)
    words = {tuple(LETTERS[i] for i in w) for w in defining_relation(matrix)}
    base = k - frac.p
    for g, word in enumerate(frac.generators):
        assert tuple(sorted(word + LETTERS[base + g], key=LETTERS.index)) in words
    # 2^p - 1 words in the defining relation of a regular 2^(k-p)
    assert len(words) == 2**frac.p - 1


@pytest.mark.parametrize("k", sorted(FRACTIONS))
def test_main_effects_and_2fis_unaliased(k: int) -> None:
    matrix = factorial_matrix(k)
    assert aliased_pairs(matrix) == []
    cols = effect_columns(matrix)
    assert all(sum(c) == 0 for key, c in cols.items() if key)  # every effect balanced


@pytest.mark.parametrize("k", sorted(FRACTIONS))
def test_fraction_contains_the_baseline(k: int) -> None:
    arms = build_arms(gates(k), "factorial")
    assert arms[0].name == "baseline" and arms[0].on == frozenset()
    assert len({a.on for a in arms}) == len(arms)
    # the all-on run is in the fraction exactly when every word has even length
    even = all(len(w) % 2 == 0 for w in defining_relation(factorial_matrix(k)))
    assert any(a.name == "combined" for a in arms) == even


def test_orthogonality_check_has_teeth() -> None:
    """A resolution IV design (2^(6-2), E=ABC, F=BCD) must fail the same check."""
    rows = [(*r, r[0] * r[1] * r[2], r[1] * r[2] * r[3]) for r in full_factorial(4)]
    assert resolution(rows) == 4
    assert aliased_pairs(rows)  # some two-factor interactions are aliased


def test_resolution_known_designs() -> None:
    half = [(a, b, a * b) for a, b in full_factorial(2)]  # 2^(3-1), C = AB
    assert resolution(half) == 3
    assert defining_relation(half) == [(0, 1, 2)]
    neg = [(a, b, -a * b) for a, b in full_factorial(2)]  # sign does not matter
    assert resolution(neg) == 3
    assert resolution(full_factorial(5)) == 6


def test_resolution_rejects_non_designs() -> None:
    with pytest.raises(ValueError, match="not \\+1 or -1"):
        resolution([(1, 0), (-1, 1)])
    with pytest.raises(ValueError, match="levels"):
        resolution([(1, 1), (-1,)])
    with pytest.raises(ValueError, match="empty"):
        resolution([])
    # a 12-run Plackett-Burman design is not regular: interactions are partially aliased
    gen = [1, 1, -1, 1, 1, 1, -1, -1, -1, 1, -1]
    pb = [tuple(gen[(j - i) % 11] for j in range(11)) for i in range(11)] + [(-1,) * 11]
    with pytest.raises(ValueError, match="regular"):
        resolution(pb)


def test_describe() -> None:
    assert FRACTIONS[5].describe() == "2^(5-1) res V: E = -ABCD"
    assert FRACTIONS[6].describe() == "2^(6-1) res VI: F = +ABCDE"
    assert FRACTIONS[8].describe() == "2^(8-2) res V: G = -ABCD, H = -ABEF"
    assert math.log2(FRACTIONS[11].runs) == 7
