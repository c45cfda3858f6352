"""Where the time went (issue 13 part 5): constructed rounds whose phases and stages have known
effects; the effects come back with intervals paired by block, ranked by share of the saving,
and nothing is given an interval or a share the data cannot support."""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd
import pytest

from abtest.stats.phases import LATENCY, pod_phases, stage_means, where_time_went

SANDBOX_CUT = 0.30  # the arm's sandbox phase is this much shorter per pod, in seconds
STATUS_CUT = 0.020  # and its pod-status-sync stage this much shorter per observation
SYNC = 'kubelet_pod_status_sync_duration_seconds{operation="update"}'


def _pods(blocks: int, sizes: tuple[int, ...] = (20,), seed: int = 7) -> pd.DataFrame:
    """Pods of arms baseline and +fast, one round per (block, arm, size), with block drift."""
    rng = np.random.default_rng(seed)
    rows = []
    round_id = 0
    for block in range(1, blocks + 1):
        drift = rng.normal(0.0, 0.05)
        for arm in ("baseline", "+fast"):
            for size in sizes:
                round_id += 1
                for i in range(size):
                    sent = i * 0.001
                    sched = sent + 0.10 + drift + rng.normal(0, 0.01)
                    sandbox = 0.80 - (SANDBOX_CUT if arm == "+fast" else 0.0) + drift
                    start = sched + sandbox + rng.normal(0, 0.02)
                    cready = start + 0.40 + rng.normal(0, 0.02)
                    ready = cready + 0.05 + rng.normal(0, 0.005)
                    rows.append(
                        {
                            "round_id": round_id,
                            "arm": arm,
                            "size": size,
                            "block": block,
                            "sent_s": sent,
                            "scheduled_s": sched,
                            "ready_to_start_s": start,
                            "containers_ready_s": cready,
                            "ready_s": ready,
                        }
                    )
    return pd.DataFrame(rows)


def _rounds(pods: pd.DataFrame) -> pd.DataFrame:
    grouped = pods.groupby("round_id")
    frame = grouped.agg(arm=("arm", "first"), size=("size", "first"), block=("block", "first"))
    frame["batch_ready_s"] = grouped["ready_s"].max() - grouped["sent_s"].min()
    return frame.reset_index()


def _deltas(rounds: pd.DataFrame, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for r in rounds.itertuples():
        fast = r.arm == "+fast"
        n = 3.0 * cast(int, r.size)
        sync = 0.050 - (STATUS_CUT if fast else 0.0) + rng.normal(0, 0.002)
        relist = 0.008 + rng.normal(0, 0.0005)  # unchanged by the arm
        rows += [
            {
                "round_id": r.round_id,
                "metric": SYNC.split("{")[0],
                "labels": 'operation="update"',
                "delta_sum": sync * n,
                "delta_count": n,
            },
            {
                "round_id": r.round_id,
                "metric": "kubelet_pleg_relist_duration_seconds",
                "labels": "",
                "delta_sum": relist * 10,
                "delta_count": 10.0,
            },
            # a counter: no sum, never an item
            {
                "round_id": r.round_id,
                "metric": "kubelet_started_pods_total",
                "labels": "",
                "delta_sum": None,
                "delta_count": float(cast(int, r.size)),
            },
        ]
    return pd.DataFrame(rows)


def _went(blocks: int, **kw: object):  # type: ignore[no-untyped-def]
    pods = _pods(blocks, **kw)  # type: ignore[arg-type]
    rounds = _rounds(pods)
    items = pd.concat([pod_phases(pods), stage_means(_deltas(rounds))], ignore_index=True)
    return where_time_went(rounds, items, baseline="baseline")


def test_phase_means_add_up_to_the_mean_latency() -> None:
    pods = _pods(2)
    items = pod_phases(pods)
    per_round = items.pivot(index="round_id", columns="item", values="value")
    phases = per_round[["schedule", "sandbox", "containers", "ready"]].sum(axis=1)
    assert np.allclose(phases, per_round[LATENCY])
    latency = (pods["ready_s"] - pods["sent_s"]).groupby(pods["round_id"]).mean()
    assert np.allclose(per_round[LATENCY], latency)


def test_a_pod_missing_a_milestone_is_left_out_of_that_phase_only() -> None:
    pods = _pods(1)
    pods.loc[0, "ready_to_start_s"] = np.nan
    items = pod_phases(pods)
    first = items[items["round_id"] == pods.loc[0, "round_id"]].set_index("item")["value"]
    rest = pods[(pods["round_id"] == pods.loc[0, "round_id"]) & (pods.index != 0)]
    assert first["sandbox"] == pytest.approx(
        (rest["ready_to_start_s"] - rest["scheduled_s"]).mean()
    )
    same = pods[pods["round_id"] == pods.loc[0, "round_id"]]
    assert first["schedule"] == pytest.approx((same["scheduled_s"] - same["sent_s"]).mean())


def test_stage_means_are_per_observation_and_skip_counters() -> None:
    deltas = pd.DataFrame(
        [
            {"round_id": 1, "metric": "m", "labels": "", "delta_sum": 3.0, "delta_count": 6.0},
            {"round_id": 1, "metric": "m", "labels": 'a="b"', "delta_sum": 1.0, "delta_count": 0},
            {"round_id": 1, "metric": "c", "labels": "", "delta_sum": None, "delta_count": 4.0},
        ]
    )
    items = stage_means(deltas)
    assert items[["item", "value"]].to_dict(orient="records") == [{"item": "m", "value": 0.5}]


def test_known_effects_are_recovered_and_ranked_by_share() -> None:
    went = _went(blocks=6)
    assert len(went) == 1
    w = went[0]
    assert (w.arm, w.baseline, w.size) == ("+fast", "baseline", 20)
    assert w.clear and w.batch.savings_ci is not None and w.batch.savings_ci[0] > 0

    latency, *phases = w.phases
    assert latency.item == LATENCY and latency.rank == 0
    top = phases[0]
    assert (top.item, top.rank) == ("sandbox", 1)
    assert top.method == "paired" and top.n_blocks == 6
    # recovered (within noise; coverage itself is the calibration tests' business)
    assert top.saving_s == pytest.approx(SANDBOX_CUT, abs=0.02)
    assert top.ci is not None and 0 < top.ci[0] < top.saving_s < top.ci[1]
    assert top.share_pct == pytest.approx(top.saving_s / w.batch.savings_s * 100)
    # the sandbox cut is the whole saving here: its share is close to 100 %
    assert 80.0 < (top.share_pct or 0) < 120.0
    # an unchanged phase: a change near 0 with an interval, a small share
    schedule = next(c for c in phases if c.item == "schedule")
    assert schedule.ci is not None and abs(schedule.saving_s) < 0.01
    assert abs(schedule.share_pct or 0) < 10.0
    # every phase change plus the others add up to the latency change (same blocks, linear)
    assert sum(c.saving_s for c in phases) == pytest.approx(latency.saving_s)

    sync, relist = w.stages
    assert (sync.item, sync.rank, relist.rank) == (SYNC, 1, 2)
    assert sync.saving_s == pytest.approx(STATUS_CUT, abs=0.003)
    assert sync.ci is not None and sync.ci[0] > 0
    assert relist.ci is not None and abs(relist.saving_s) < 0.001


def test_one_block_gives_no_interval_and_no_share() -> None:
    w = _went(blocks=1)[0]
    assert w.batch.savings_ci is None and not w.clear
    for c in (*w.phases, *w.stages):
        assert c.ci is None and c.p_value is None and c.share_pct is None
        assert "n too small" in c.note
    # still ranked, by the size of the change: the sandbox moved most
    assert w.phases[1].item == "sandbox"


def test_no_clear_saving_gives_no_share() -> None:
    pods = _pods(5)
    pods["arm"] = pods["arm"].map({"baseline": "baseline", "+fast": "+same"})
    # undo the sandbox cut: the arm is the baseline under another name
    fast = pods["arm"] == "+same"
    for col in ("ready_to_start_s", "containers_ready_s", "ready_s"):
        pods.loc[fast, col] += SANDBOX_CUT
    rounds = _rounds(pods)
    went = where_time_went(rounds, pod_phases(pods), baseline="baseline")[0]
    assert not went.clear
    assert all(c.share_pct is None for c in went.phases)


def test_unpaired_rounds_use_welch_and_say_so() -> None:
    pods = _pods(4)
    rounds = _rounds(pods).drop(columns="block")
    w = where_time_went(rounds, pod_phases(pods), baseline="baseline")[0]
    assert {c.method for c in w.phases} == {"welch"}
    assert all(c.n_blocks == 0 for c in w.phases)


def test_an_unknown_baseline_is_a_user_error() -> None:
    from abtest.errors import UserError

    pods = _pods(2)
    with pytest.raises(UserError, match="no rounds for baseline arm"):
        where_time_went(_rounds(pods), pod_phases(pods), baseline="nope")


def test_phases_add_up_unless_a_pod_lacks_a_milestone() -> None:
    pods = _pods(3)
    rounds = _rounds(pods)
    assert where_time_went(rounds, pod_phases(pods), baseline="baseline")[0].phases_add_up
    # a kubelet that never reports PodReadyToStartContainers for one pod of an arm's round
    pods.loc[pods["arm"] == "+fast", "ready_to_start_s"] = pods["ready_to_start_s"].where(
        pods.index != pods.index[pods["arm"] == "+fast"][0]
    )
    went = where_time_went(rounds, pod_phases(pods), baseline="baseline")[0]
    assert not went.phases_add_up


def test_the_batch_row_p_is_on_the_scale_of_its_interval() -> None:
    from abtest.stats.contrast import estimate_contrast

    pods = _pods(4)
    rounds = _rounds(pods)
    w = where_time_went(rounds, pod_phases(pods), baseline="baseline")[0]
    seconds = estimate_contrast(
        rounds,
        coefficients={"baseline": 1.0, "+fast": -1.0},
        size=20,
        metric="batch_ready_s",
        confidence=0.95,
        scale="raw",
    )
    assert w.batch_p_seconds == pytest.approx(seconds.p_value)
    assert w.batch.savings_ci == pytest.approx(seconds.ci)


def _noisy_batch(rounds: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The batch time drowned in round noise (a relist tick or two either way), so that only
    the phases and stages can show the arm's mechanism."""
    rng = np.random.default_rng(seed)
    noisy = rounds.copy()
    noisy["batch_ready_s"] = 5.0 + rng.integers(0, 3, size=len(noisy)).astype(float)
    return noisy


def test_a_mechanism_resolves_with_holm_where_the_batch_time_does_not() -> None:
    pods = _pods(6)
    rounds = _noisy_batch(_rounds(pods), seed=11)
    items = pd.concat([pod_phases(pods), stage_means(_deltas(rounds))], ignore_index=True)
    w = where_time_went(rounds, items, baseline="baseline")[0]
    assert not w.clear
    held = {c.item: p for c, p in w.resolved}
    # the two moved items hold after Holm over all of them; the unchanged relist does not
    assert "sandbox" in held and SYNC in held
    assert "kubelet_pleg_relist_duration_seconds" not in held and "schedule" not in held
    n = w.n_items
    for c, p in w.resolved:
        assert c.p_value is not None and c.p_value <= p <= min(1.0, n * c.p_value) + 1e-12
    assert [p for _, p in w.resolved] == sorted(p for _, p in w.resolved)


def test_no_mechanism_is_named_when_nothing_moved_in_most_runs() -> None:
    # the family-wise promise of Holm: across null runs, any item named at most ~alpha of the time
    named = 0
    runs = 60
    for seed in range(runs):
        pods = _pods(4, seed=100 + seed)
        fast = pods["arm"] == "+fast"
        for col in ("ready_to_start_s", "containers_ready_s", "ready_s"):
            pods.loc[fast, col] += SANDBOX_CUT  # undo the sandbox cut
        rounds = _rounds(pods)
        w = where_time_went(rounds, pod_phases(pods), baseline="baseline")[0]
        named += bool(w.resolved)
    # 5 % of 60 plus binomial slack (P(X > 6) is 3 % at exactly 5 %)
    assert named <= 0.05 * runs + 3
