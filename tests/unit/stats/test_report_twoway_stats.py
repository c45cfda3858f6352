"""The two-way runtime x settings table's statistics (issue 13 part 1), on constructed rounds
with known effects: cells, the settings' saving per runtime, and the interaction (ratio of
ratios) with intervals paired by block; none of them where the data cannot support one."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import pandas as pd
import pytest

from abtest.errors import UserError
from abtest.stats.intervals import one_sample_t
from abtest.stats.twoway import two_way, two_way_arms

ARMS = {
    "baseline": frozenset(),
    "+crun": frozenset({"crun"}),
    "+speedups": frozenset({"speedups"}),
    "combined": frozenset({"crun", "speedups"}),
}
RUNTIME = 0.90  # crun alone: x0.9
SETTINGS = {False: 0.80, True: 0.70}  # settings: x0.8 on runc, x0.7 on crun
TRUE_ROR = SETTINGS[True] / SETTINGS[False]  # 0.875


def _rounds(
    blocks: int, sizes: tuple[int, ...] = (50, 100), noise: float = 0.02, seed: int = 1
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for block in range(1, blocks + 1):
        drift = math.exp(rng.normal(0.0, 0.15))  # a slow block hits every arm alike
        for arm, on in ARMS.items():
            crun = "crun" in on
            factor = (RUNTIME if crun else 1.0) * (SETTINGS[crun] if "speedups" in on else 1.0)
            for size in sizes:
                base = 0.045 * size  # 2.25 s at 50 pods, 4.5 s at 100
                value = base * factor * drift * math.exp(rng.normal(0.0, noise))
                rows.append({"arm": arm, "size": size, "block": block, "batch_ready_s": value})
    return pd.DataFrame(rows)


def _table(rounds: pd.DataFrame, **kw: object):  # type: ignore[no-untyped-def]
    return two_way(
        rounds,
        arms=ARMS,
        pod_factor="crun",
        settings=("speedups",),
        levels=("runc", "crun"),
        metric="batch_ready_s",
        **kw,  # type: ignore[arg-type]
    )


def test_the_four_arms_are_found_by_what_they_turn_on() -> None:
    four = two_way_arms(ARMS, pod_factor="crun", settings=("speedups",))
    assert four == {
        (False, False): "baseline",
        (False, True): "+speedups",
        (True, False): "+crun",
        (True, True): "combined",
    }


def test_known_effects_are_recovered() -> None:
    t = _table(_rounds(blocks=8))
    assert t.levels == ("runc", "crun") and t.sizes == (50, 100)
    # cells: rows runc, crun; columns size x without/with
    runc_without = t.cell("runc", False, 100)
    crun_with = t.cell("crun", True, 100)
    assert runc_without is not None and crun_with is not None
    assert (runc_without.arm, crun_with.arm) == ("baseline", "combined")
    assert runc_without.ci is not None and runc_without.n == 8
    assert crun_with.mean / runc_without.mean == pytest.approx(RUNTIME * SETTINGS[True], rel=0.05)
    # the settings' saving per runtime: percent reduction of 20 % on runc, 30 % on crun
    for level, crun in (("runc", False), ("crun", True)):
        c = t.saving(level, 100)
        assert c is not None and c.method == "paired" and c.n_pairs == 8
        assert c.pct_reduction == pytest.approx((1 - SETTINGS[crun]) * 100, abs=2.0)
        assert c.pct_ci is not None and c.pct_ci[0] > 0
        assert c.savings_ci is not None and c.savings_ci[0] > 0
        assert c.p_adjusted is not None and c.p_value is not None
        assert c.p_adjusted >= c.p_value  # Holm over the two levels of this size
    # the interaction: ratio of ratios 0.875, i.e. 12.5 % more cut on crun
    i = t.interaction(100)
    assert i is not None and i.method == "paired" and i.n_blocks == 8
    assert i.ratio_of_ratios == pytest.approx(TRUE_ROR, rel=0.03)
    assert i.ratio_ci is not None and i.ratio_ci[1] < 1.0
    assert i.pct_difference == pytest.approx((1 - i.ratio_of_ratios) * 100)
    assert i.pct_ci is not None and i.pct_ci[0] > 0
    # the difference of savings in seconds is the difference of the two per-level savings
    runc, crun = t.saving("runc", 100), t.saving("crun", 100)
    assert runc is not None and crun is not None
    assert i.savings_diff_s == pytest.approx(crun.savings_s - runc.savings_s)
    assert i.savings_diff_ci is not None


def test_no_interaction_gives_an_interval_around_one() -> None:
    rounds = _rounds(blocks=6, seed=4)
    # make the settings cut the same 20 % on both runtimes
    combined = rounds["arm"] == "combined"
    rounds.loc[combined, "batch_ready_s"] *= SETTINGS[False] / SETTINGS[True]
    i = _table(rounds).interaction(50)
    assert i is not None and i.ratio_ci is not None
    assert i.ratio_of_ratios == pytest.approx(1.0, abs=0.03)
    assert i.ratio_ci[0] < 1.0 < i.ratio_ci[1]


def test_one_block_gives_no_interval_and_says_why() -> None:
    t = _table(_rounds(blocks=1))
    for cell in t.cells:
        assert cell.ci is None and "n too small" in cell.note
    for _, c in t.savings:
        assert c.savings_ci is None and c.pct_ci is None and c.p_value is None
        assert "n too small" in c.note
    for i in t.interactions:
        assert i.ratio_ci is None and i.pct_ci is None and i.p_value is None
        assert i.savings_diff_ci is None and "n too small" in i.note


def test_a_size_missing_an_arm_has_no_interaction_there() -> None:
    rounds = _rounds(blocks=4)
    rounds = rounds[~((rounds["arm"] == "combined") & (rounds["size"] == 50))]
    t = _table(rounds)
    assert t.cell("crun", True, 50) is None and t.saving("crun", 50) is None
    assert t.saving("runc", 50) is not None
    assert t.interaction(50) is None and t.interaction(100) is not None


@pytest.mark.parametrize(
    ("arms", "settings", "match"),
    [
        ({k: v for k, v in ARMS.items() if k != "combined"}, ("speedups",), "no arm with"),
        (ARMS, (), "at least one kubelet factor"),
        (ARMS, ("crun",), "both the pod-spec factor and a setting"),
        # two kubelet factors: "with" needs both on, at both levels
        (ARMS, ("speedups", "other"), "no arm with"),
    ],
)
def test_designs_without_the_four_arms_are_refused(
    arms: dict[str, frozenset[str]], settings: tuple[str, ...], match: str
) -> None:
    with pytest.raises(UserError, match=match):
        two_way_arms(arms, pod_factor="crun", settings=settings)


def test_several_settings_are_all_on_in_with() -> None:
    arms = {
        "baseline": frozenset(),
        "+crun": frozenset({"crun"}),
        "+a": frozenset({"a"}),
        "+b": frozenset({"b"}),
        "a+b": frozenset({"a", "b"}),
        "crun+a": frozenset({"crun", "a"}),
        "crun+b": frozenset({"crun", "b"}),
        "all": frozenset({"crun", "a", "b"}),
    }
    four = two_way_arms(arms, pod_factor="crun", settings=("a", "b"))
    assert four[(False, True)] == "a+b" and four[(True, True)] == "all"


def test_equal_levels_are_refused() -> None:
    with pytest.raises(UserError, match="both 'runc'"):
        two_way(
            _rounds(blocks=2),
            arms=ARMS,
            pod_factor="crun",
            settings=("speedups",),
            levels=("runc", "runc"),
            metric="batch_ready_s",
        )


def test_the_interaction_is_a_paired_t_on_per_block_ratio_of_ratios() -> None:
    rounds = _rounds(blocks=5, seed=9)
    i = _table(rounds).interaction(50)
    assert i is not None and i.ratio_ci is not None
    at = rounds[rounds["size"] == 50].pivot(index="block", columns="arm", values="batch_ready_s")
    # a Series (numpy's ufuncs on a Series return one; pandas-stubs say ndarray)
    per_block = cast(
        "pd.Series[float]",
        np.log(at["combined"] / at["+crun"]) - np.log(at["+speedups"] / at["baseline"]),
    )
    t = one_sample_t(per_block.to_numpy(), 0.95)
    assert i.ratio_of_ratios == pytest.approx(math.exp(float(t.estimate)))
    assert i.ratio_ci == pytest.approx((math.exp(float(t.lo)), math.exp(float(t.hi))))
    assert i.p_value == pytest.approx(float(t.p_value))


@pytest.mark.parametrize("blocks", [3, 5, 10])
def test_the_interaction_interval_covers_the_truth_95_percent(blocks: int) -> None:
    """Calibration by simulation (the same per-block contrast and t-interval as above, for
    20 000 experiments at once): log-normal rounds, block drift, a true ratio of ratios."""
    rng = np.random.default_rng(blocks)
    n = 20_000
    true_log = math.log(TRUE_ROR)
    drift = rng.normal(0.0, 0.3, (n, blocks, 1))  # cancels within each block
    effects = np.array([0.0, math.log(RUNTIME), math.log(0.8), math.log(RUNTIME * 0.8) + true_log])
    logs = effects + drift + rng.normal(0.0, 0.1, (n, blocks, 4))
    per_block = logs[..., 3] - logs[..., 1] - logs[..., 2] + logs[..., 0]
    t = one_sample_t(per_block, 0.95)
    coverage = float(np.mean((t.lo < true_log) & (true_log < t.hi)))
    assert 0.93 <= coverage <= 0.97
