"""Fleet sweeps without a cluster: the node x arm interaction (against a hand computation and
scipy, and its coverage by simulation), the fleet report tables, the fleet checks before
anything is touched, a failure on one fake node naming that node, plan and regress with
several profiles."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps

from abtest.stats.fleet import EACH_VS_REST, TWO_NODES, node_interaction, node_interactions


def _frame(effects: dict[str, list[tuple[float, float]]], size: int = 10) -> pd.DataFrame:
    """Rounds from per node [(baseline s, arm s) per block]."""
    rows = []
    for node, blocks in effects.items():
        for b, (base, arm) in enumerate(blocks):
            rows.append({"node": node, "block": b, "arm": "baseline", "size": size, "m": base})
            rows.append({"node": node, "block": b, "arm": "x", "size": size, "m": arm})
    return pd.DataFrame(rows)


def test_two_nodes_difference_of_log_ratios_matches_a_hand_computation() -> None:
    rounds = _frame(
        {"a": [(2.0, 1.6), (2.2, 1.9), (2.1, 1.7)], "b": [(2.0, 2.0), (2.4, 2.3), (1.9, 1.95)]}
    )
    got = node_interaction(rounds, baseline="baseline", treatment="x", size=10, metric="m")
    da = np.log([1.6 / 2.0, 1.9 / 2.2, 1.7 / 2.1])
    db = np.log([2.0 / 2.0, 2.3 / 2.4, 1.95 / 1.9])
    diff = da.mean() - db.mean()
    s2 = (((da - da.mean()) ** 2).sum() + ((db - db.mean()) ** 2).sum()) / 4
    se = math.sqrt(s2 * (1 / 3 + 1 / 3))
    half = sps.t.ppf(0.975, 4) * se
    assert got.method == TWO_NODES and got.nodes == ("a", "b") and got.df == 4
    (c,) = got.contrasts
    assert c.node == "a" and c.rest == ("b",)
    assert c.difference == pytest.approx(diff)
    assert c.difference_ci == pytest.approx((diff - half, diff + half))
    assert c.ratio_of_ratios == pytest.approx(math.exp(diff))
    assert c.pct_difference == pytest.approx((math.exp(diff) - 1) * 100)
    # scipy: the pooled two-sample t, and F = t^2 with the same p-value
    t = sps.ttest_ind(da, db, equal_var=True)
    assert c.p_value == pytest.approx(t.pvalue)
    assert got.f_stat == pytest.approx(t.statistic**2)
    assert got.p_value == pytest.approx(t.pvalue)


def test_three_nodes_heterogeneity_is_scipy_one_way_anova_and_each_vs_rest_is_holm() -> None:
    rng = np.random.default_rng(3)
    effects = {
        n: [(2.0 * math.exp(rng.normal(0, 0.05)), 2.0 * math.exp(shift + rng.normal(0, 0.05)))
            for _ in range(4)]
        for n, shift in (("a", -0.2), ("b", -0.2), ("c", 0.1))
    }  # fmt: skip
    rounds = _frame(effects)
    got = node_interaction(rounds, baseline="baseline", treatment="x", size=10, metric="m")
    d = {n: np.log([t / b for b, t in effects[n]]) for n in effects}
    anova = sps.f_oneway(d["a"], d["b"], d["c"])
    assert got.method == EACH_VS_REST and got.df == 9
    assert got.f_stat == pytest.approx(anova.statistic)
    assert got.p_value == pytest.approx(anova.pvalue)
    assert [c.node for c in got.contrasts] == ["a", "b", "c"]
    c = got.contrasts[2]  # c vs a+b: the odd one out
    assert c.difference == pytest.approx(d["c"].mean() - np.concatenate([d["a"], d["b"]]).mean())
    assert c.difference_ci is not None and c.difference_ci[0] > 0
    ps = [x.p_value for x in got.contrasts]
    holm_by_hand = sorted(ps)
    assert c.p_adjusted == pytest.approx(min(1.0, 3 * holm_by_hand[0]))
    assert all(x.p_adjusted is not None and x.p_adjusted >= x.p_value for x in got.contrasts)


def test_blocks_pair_within_a_node_only_and_repeated_rounds_average_on_the_log_scale() -> None:
    rounds = _frame({"a": [(2.0, 1.0), (4.0, 2.0)], "b": [(2.0, 2.0), (4.0, 4.0)]})
    # a second baseline round in node a's block 0: averaged as logs (geometric mean 2.0)
    extra = {"node": "a", "block": 0, "arm": "baseline", "size": 10, "m": 1.0}
    rounds = pd.concat([rounds, pd.DataFrame([extra])], ignore_index=True)
    rounds.loc[(rounds.node == "a") & (rounds.block == 0) & (rounds.arm == "baseline"), "m"] = [
        4.0,
        1.0,
    ]
    got = node_interaction(rounds, baseline="baseline", treatment="x", size=10, metric="m")
    assert got.n_pairs == (2, 2)
    # node a: log ratios log(1/2), log(2/4); b: 0, 0 -> no within-node variation at all
    assert got.contrasts == () and "no variation" in got.note


def test_no_interval_without_two_nodes_or_within_node_freedom() -> None:
    one = node_interaction(
        _frame({"a": [(2, 1), (2, 1.1)]}), baseline="baseline", treatment="x", size=10, metric="m"
    )
    assert one.contrasts == () and one.p_value is None and "1 node" in one.note
    single_blocks = node_interaction(
        _frame({"a": [(2, 1)], "b": [(2, 1.5)]}),
        baseline="baseline",
        treatment="x",
        size=10,
        metric="m",
    )
    assert single_blocks.contrasts == () and "one block per node" in single_blocks.note


def test_node_interactions_covers_every_arm_and_size_with_a_baseline() -> None:
    rounds = pd.concat(
        [_frame({"a": [(2, 1), (2, 1.1)], "b": [(2, 1.2), (2.1, 1)]}, size=s) for s in (10, 20)]
    )
    got = node_interactions(rounds, baseline="baseline", metric="m")
    assert [(i.arm, i.size) for i in got] == [("x", 10), ("x", 20)]


def test_interaction_interval_covers_the_true_difference_93_to_97_percent() -> None:
    """Calibration at the fleet lab's sizes: 2 nodes x 2-5 blocks, true difference 0.1."""
    rng = np.random.default_rng(14)
    for blocks in (2, 5):
        hits, trials = 0, 1000
        for _ in range(trials):
            drift = rng.normal(0, 0.3, size=(2, blocks))  # block effects: cancel in pairs
            noise = rng.normal(0, 0.08, size=(2, blocks, 2))
            logs = {
                n: [
                    (math.exp(drift[i, b] + noise[i, b, 0]),
                     math.exp(drift[i, b] + noise[i, b, 1] - 0.2 + (0.1 if n == "a" else 0.0)))
                    for b in range(blocks)
                ]
                for i, n in enumerate(("a", "b"))
            }  # fmt: skip
            got = node_interaction(
                _frame(logs), baseline="baseline", treatment="x", size=10, metric="m"
            )
            ci = got.contrasts[0].difference_ci
            assert ci is not None
            hits += ci[0] <= 0.1 <= ci[1]
        assert 0.93 <= hits / trials <= 0.97, (blocks, hits / trials)
