"""Randomized complete block schedules: structure, determinism, resume, estimates."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from abtest.config.domain import Arm, Catalog, Factor, by_name
from abtest.engine.design import gates_all
from abtest.engine.schedule import (
    build_schedule,
    estimate_seconds,
    remaining,
    restarts,
    shuffled,
)
from abtest.errors import UserError


def arms(k: int = 2) -> list[Arm]:
    return gates_all(
        [Factor(f"Gate{c}", "feature_gate", True, False, "") for c in "ABCDEF"[:k]], False
    )


SIZES = [10, 50, 100]


def test_literal_order_for_seed_42() -> None:
    """Pinned: the same seed must give this exact order on every machine and Python."""
    s = build_schedule(arms(), SIZES, blocks=2, seed=42, warmup=False)
    assert [(v.block, v.arm, v.sizes) for v in s.visits] == [
        (0, "+GateB", (50, 100, 10)),
        (0, "+GateA", (50, 100, 10)),
        (0, "combined", (50, 10, 100)),
        (0, "baseline", (10, 50, 100)),
        (1, "+GateA", (50, 100, 10)),
        (1, "+GateB", (50, 10, 100)),
        (1, "combined", (50, 10, 100)),
        (1, "baseline", (10, 50, 100)),
    ]


def test_same_seed_same_schedule_other_seed_other() -> None:
    a = build_schedule(arms(3), SIZES, 4, seed=7, warmup=True)
    b = build_schedule(arms(3), SIZES, 4, seed=7, warmup=True)
    assert a == b
    others = {build_schedule(arms(3), SIZES, 4, seed=s, warmup=True).slots for s in range(8, 18)}
    assert a.slots not in others
    assert len(others) == 10


@pytest.mark.parametrize("warmup", [False, True])
def test_complete_blocks(warmup: bool) -> None:
    the_arms = arms(3)
    blocks = 5
    s = build_schedule(the_arms, SIZES, blocks, seed=1, warmup=warmup)
    names = sorted(a.name for a in the_arms)
    assert len(s.visits) == blocks * len(the_arms) == restarts(s)
    for b in range(blocks):
        visits = [v for v in s.visits if v.block == b]
        assert sorted(v.arm for v in visits) == names  # every arm once per block
        assert [v.position for v in visits] == list(range(len(the_arms)))
    for v in s.visits:
        assert sorted(v.sizes) == sorted(SIZES)  # every size once per visit
        assert v.warmup is warmup
    per_visit = len(SIZES) + (1 if warmup else 0)
    assert len(s.slots) == len(s.visits) * per_visit
    assert s.measured_rounds == len(s.visits) * len(SIZES)
    # the flattened slots follow the visits exactly
    assert [sl.ordinal for sl in s.slots] == list(range(len(s.slots)))
    for v in s.visits:
        vs = [sl for sl in s.slots if sl.visit_index == v.index]
        assert all(sl.block == v.block and sl.arm == v.arm for sl in vs)
        measured = [sl.size for sl in vs if not sl.warmup]
        assert tuple(measured) == v.sizes
        if warmup:
            assert vs[0].warmup and vs[0].size == min(SIZES) == v.warmup_size
            assert sum(sl.warmup for sl in vs) == 1
        else:
            assert not any(sl.warmup for sl in vs)
    # measured rounds: each (block, arm, size) exactly once
    keys = [sl.key for sl in s.slots]
    assert len(keys) == len(set(keys))


def test_arm_order_is_not_fixed() -> None:
    """Over many seeds, each arm leads a block about equally often (no bias)."""
    the_arms = arms(3)  # 5 arms
    first = Counter(
        build_schedule(the_arms, [10], 1, seed, False).visits[0].arm for seed in range(2000)
    )
    assert set(first) == {a.name for a in the_arms}
    assert all(300 < n < 500 for n in first.values()), first


def test_shuffle_is_uniform_over_permutations() -> None:
    rng = random.Random(3)
    counts = Counter(tuple(shuffled("abc", rng)) for _ in range(6000))
    assert len(counts) == 6
    assert all(850 < n < 1150 for n in counts.values()), counts


def test_lookup_and_json() -> None:
    s = build_schedule(arms(), SIZES, 2, seed=5, warmup=True)
    assert s.arm("combined").on == {"GateA", "GateB"}
    with pytest.raises(KeyError):
        s.arm("nope")
    d = json.loads(json.dumps(s.to_dict()))
    assert d["restarts"] == 8 and d["rounds"] == 32 and d["measured_rounds"] == 24
    assert d["arms"][0] == {
        "name": "baseline",
        "on": [],
        "settings": {"featureGates.GateA": False, "featureGates.GateB": False},
    }


def test_by_name_is_the_one_lookup_of_factors_and_arms() -> None:
    factors = tuple(Factor(f"Gate{c}", "feature_gate", True, False, "") for c in "AB")
    catalog = Catalog("c", "c.yaml", "", factors)
    assert catalog.get("GateB") is factors[1] and by_name(factors, "GateA") is factors[0]
    with pytest.raises(KeyError):
        catalog.get("GateC")
    assert by_name(arms(), "combined").on == {"GateA", "GateB"}


# --------------------------------------------------------------------------- resume


def test_remaining_nothing_done_and_all_done() -> None:
    s = build_schedule(arms(), SIZES, 2, seed=9, warmup=True)
    assert remaining(s, set()) == list(s.slots)
    assert remaining(s, {sl.key for sl in s.slots}) == []
    # warm-ups are not needed for a visit to count as done
    assert remaining(s, {sl.key for sl in s.slots if not sl.warmup}) == []


def test_remaining_resumes_mid_visit_with_a_fresh_warmup() -> None:
    s = build_schedule(arms(), SIZES, 2, seed=9, warmup=True)
    cut = 6  # visit 0 (4 slots) done, visit 1: warm-up + first size done
    done = {sl.key for sl in s.slots[:cut]}
    rest = remaining(s, done)
    visit1 = [sl for sl in s.slots if sl.visit_index == 1]
    assert rest[0] == visit1[0] and rest[0].warmup  # node reconfigured: warm up again
    assert rest[1:3] == visit1[2:]
    assert rest[3:] == list(s.slots[8:])
    assert restarts(s, rest) == len(s.visits) - 1


def test_remaining_without_warmup_keeps_order_and_skips_done() -> None:
    s = build_schedule(arms(), SIZES, 3, seed=11, warmup=False)
    done = {sl.key for sl in s.slots[::2]}
    rest = remaining(s, done)
    assert rest == [sl for sl in s.slots if sl.key not in done]


def test_remaining_refuses_rounds_of_another_schedule() -> None:
    s = build_schedule(arms(), SIZES, 2, seed=9, warmup=False)
    with pytest.raises(UserError, match="not in this schedule") as err:
        remaining(s, {(0, "baseline", 999, False)})
    assert err.value.where == "resume" and err.value.todo
    with pytest.raises(UserError):
        remaining(s, {(0, "baseline", 10, True)})  # no warm-ups in this schedule


# --------------------------------------------------------------------------- estimates


def test_estimate_seconds() -> None:
    s = build_schedule(arms(), [10, 50], 3, seed=2, warmup=True)
    batch = {10: 2.0, 50: 5.0}
    # 12 visits: restart 30 + warm-up (size 10) 2 + 2 + 5, cleanup 1 per round (3 rounds)
    assert estimate_seconds(s, 30.0, batch, 1.0) == pytest.approx(12 * (30 + 2 + 2 + 5 + 3))
    rest = remaining(s, {sl.key for sl in s.slots[:3]})  # visit 0 done
    assert estimate_seconds(s, 30.0, batch, 1.0, slots=rest) == pytest.approx(11 * 42)
    assert estimate_seconds(s, 30.0, batch, 1.0, slots=[]) == 0
    with pytest.raises(UserError, match=r"no batch time for size\(s\) \[50\]"):
        estimate_seconds(s, 30.0, {10: 2.0}, 1.0)
    with pytest.raises(UserError, match="restart_s"):
        estimate_seconds(s, -1.0, batch, 1.0)
    with pytest.raises(UserError, match="cleanup_s"):
        estimate_seconds(s, 1.0, batch, -1.0)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("the_arms", "sizes", "blocks", "seed", "match"),
    [
        ([], SIZES, 1, 0, "no arms"),
        (arms() + arms()[:1], SIZES, 1, 0, "not unique"),
        (arms(), [], 1, 0, "no batch sizes"),
        (arms(), [10, 0], 1, 0, "not a positive integer"),
        (arms(), [10, True], 1, 0, "not a positive integer"),
        (arms(), [10, 10], 1, 0, "repeat"),
        (arms(), SIZES, 0, 0, "blocks"),
        (arms(), SIZES, 1, -1, "seed"),
        (arms(), SIZES, 1, 1.5, "seed"),
    ],
)
def test_invalid_inputs(
    the_arms: list[Arm], sizes: list[int], blocks: int, seed: int, match: str
) -> None:
    with pytest.raises(UserError, match=match) as err:
        build_schedule(the_arms, sizes, blocks, seed, False)
    assert err.value.where == "schedule"
