"""Pure parts of the batch engine: summary (nearest-rank), acceptance, the watch tracker."""

from __future__ import annotations

import math
from typing import Any

import pytest

from abtest.batch.acceptance import judge
from abtest.batch.observe import PodTracker, parse_time
from abtest.batch.round_records import PodRecord
from abtest.batch.summary import censored_percentile, summarize
from abtest.stats.percentiles import nearest_rank


def pod(i: int, latency: float | None, sent: float = 0.0, **kw: object) -> PodRecord:
    rec = PodRecord(
        name=f"p{i:03d}",
        sent_s=sent,
        response_s=sent + 0.01,
        http_status=201,
        attempts=1,
        ready_s=None if latency is None else sent + latency,
    )
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


# --- summary -----------------------------------------------------------------------------------


def test_summary_uses_nearest_rank_on_every_pod() -> None:
    lat = [0.5 + 0.01 * i for i in range(100)]
    pods = [pod(i, x, sent=i * 0.001) for i, x in enumerate(lat)]
    s = summarize(pods, 100)
    assert s.pods_ready == 100
    assert s.p50_s == nearest_rank(s.latencies_s, 50)
    assert s.p95_s == pytest.approx(lat[94])  # rank ceil(0.95 * 100) = 95, not 96
    assert s.p99_s == pytest.approx(lat[98])
    assert s.mean_s == pytest.approx(sum(lat) / 100)
    # first request sent (t=0) -> last Ready seen
    assert s.batch_ready_s == pytest.approx(max(p.ready_s or 0 for p in pods))
    assert s.batch_ready_s is not None and s.p99_s is not None
    assert s.batch_ready_s >= s.p99_s


def test_summary_one_pod_is_every_percentile() -> None:
    s = summarize([pod(0, 1.25)], 1)
    assert s.p50_s == s.p95_s == s.p99_s == s.mean_s == 1.25
    assert s.batch_ready_s == pytest.approx(1.25)
    assert s.submit_rate == pytest.approx(1 / 0.01)


def test_summary_ties_are_repeated_values() -> None:
    s = summarize([pod(i, 2.0) for i in range(4)] + [pod(9, 3.0)], 5)
    assert s.p50_s == 2.0 and s.p95_s == 3.0 and s.p99_s == 3.0


def test_missing_ready_is_censored_not_dropped() -> None:
    pods = [pod(i, 1.0 + i / 100) for i in range(19)] + [pod(19, None)]
    s = summarize(pods, 20)
    assert s.pods_ready == 19
    assert s.p50_s == pytest.approx(1.09)  # rank 10 of 20, the missing pod is the slowest
    assert s.p95_s == pytest.approx(1.18)  # rank 19: the slowest Ready pod
    assert s.p99_s is None  # rank 20: the pod that never became Ready
    assert s.mean_s is None and s.batch_ready_s is None


def test_censored_percentile_edges() -> None:
    assert censored_percentile([], 3, 50) is None
    assert censored_percentile([1.0, 2.0], 3, 50) == 2.0  # rank 2 of 3
    assert censored_percentile([1.0, 2.0], 3, 67) is None  # rank 3 -> the missing pod
    with pytest.raises(ValueError):
        censored_percentile([1.0, 2.0], 1, 50)


def test_create_failures_and_retries_counted() -> None:
    pods = [pod(0, 1.0, attempts=3), pod(1, None, http_status=422), pod(2, 1.1)]
    pods[2].http_status, pods[2].attempts = 409, 2  # a retry found the pod created
    s = summarize(pods, 3)
    assert s.create_failures == 1 and s.create_retries == 3


def test_phase_medians() -> None:
    p = pod(0, 2.0, scheduled_s=0.1, ready_to_start_s=1.5, containers_ready_s=1.9)
    phases = summarize([p], 1).phases
    assert phases["schedule"] == pytest.approx(0.1)
    assert phases["sandbox"] == pytest.approx(1.4)
    assert phases["containers"] == pytest.approx(0.4)
    assert phases["ready"] == pytest.approx(0.1)
    assert "initialized" not in phases


# --- acceptance ----------------------------------------------------------------------------------


def test_all_ready_no_restarts_is_accepted() -> None:
    v = judge([pod(i, 1.0) for i in range(3)], 3)
    assert v.accepted and v.reason is None


def test_single_pod_round() -> None:
    assert judge([pod(0, 0.8)], 1).accepted
    v = judge([pod(0, None, waiting_reason="ErrImagePull")], 1, timed_out=True, timeout_s=20)
    assert not v.accepted
    assert v.reason is not None
    assert "1 of 1 pods never Ready within the 20 s timeout" in v.reason
    assert "ErrImagePull x1" in v.reason


def test_missing_ready_fails_with_names() -> None:
    pods = [pod(i, 1.0) for i in range(5)] + [pod(5 + i, None) for i in range(7)]
    v = judge(pods, 12, timed_out=True)
    assert not v.accepted and v.reason is not None
    assert "7 of 12 pods never Ready before the timeout" in v.reason
    assert "and 2 more" in v.reason


def test_restart_fails_acceptance() -> None:
    v = judge([pod(0, 1.0, restarts=2), pod(1, 1.0)], 2)
    assert not v.accepted and v.reason == "2 container restart(s): p000"


def test_ready_regression_fails_acceptance() -> None:
    v = judge([pod(0, 1.0), pod(1, 1.0, ready_regressed=1)], 2)
    assert not v.accepted and v.reason == "1 Ready->NotReady regression(s): p001"


def test_failed_create_and_several_reasons() -> None:
    bad = pod(1, None, http_status=None, attempts=4)
    v = judge([pod(0, 1.0, restarts=1), bad], 2)
    assert not v.accepted
    assert v.reasons[0] == "1 create request(s) failed (no answer x1)"
    assert len(v.reasons) == 2  # the failed create is not also "never Ready"


def test_sandbox_failures_never_decide() -> None:
    # FailedCreatePodSandBox is counted by the round, not an acceptance rule: a round whose pods
    # all became Ready after a retried sandbox is accepted.
    assert judge([pod(0, 3.0)], 1).accepted


def test_wrong_record_count() -> None:
    assert not judge([pod(0, 1.0)], 2).accepted


# --- watch tracker ------------------------------------------------------------------------------


def obj(
    name: str, conds: dict[str, str], restarts: int = 0, waiting: str | None = None
) -> dict[str, Any]:
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {
        "metadata": {"name": name, "creationTimestamp": "2025-01-01T00:00:00Z"},
        "status": {
            "conditions": [
                {"type": t, "status": s, "lastTransitionTime": "2025-01-01T00:00:02Z"}
                for t, s in conds.items()
            ],
            "containerStatuses": [{"restartCount": restarts, "state": state}],
        },
    }


def test_tracker_first_seen_times_and_regressions() -> None:
    t = PodTracker(["a", "b"])
    t.observe("ADDED", obj("a", {}), 1.0)
    t.observe("MODIFIED", obj("a", {"PodScheduled": "True", "Initialized": "True"}), 1.1)
    t.observe("MODIFIED", obj("a", {"PodScheduled": "True"}, waiting="ContainerCreating"), 1.2)
    t.observe("MODIFIED", obj("a", {"PodReadyToStartContainers": "True"}), 1.5)
    t.observe("MODIFIED", obj("a", {"ContainersReady": "True", "Ready": "True"}), 2.0)
    t.observe("MODIFIED", obj("a", {"Ready": "False"}, restarts=1), 3.0)
    t.observe("MODIFIED", obj("a", {"Ready": "True"}, restarts=1), 4.0)
    t.observe("ADDED", obj("zzz", {"Ready": "True"}), 1.0)  # not ours
    a = t.snapshot()["a"]
    assert (a.scheduled, a.initialized, a.ready_to_start, a.ready) == (1.1, 1.1, 1.5, 2.0)
    assert a.ready_regressed == 1 and a.restarts == 1
    assert a.waiting_reason == "ContainerCreating"
    assert a.server_created == parse_time("2025-01-01T00:00:00Z")
    assert a.server_created is not None and a.server_ready == a.server_created + 2
    assert t.ready_count == 1 and "zzz" not in t.snapshot()
    assert not t.wait_all_ready(deadline=0.0, clock=lambda: 1.0)
    t.freeze()
    t.observe("MODIFIED", obj("b", {"Ready": "True"}), 5.0)
    assert "b" not in t.snapshot()


def test_tracker_wait_target_and_relist_mark() -> None:
    t = PodTracker(["a", "b"])
    t.observe("RELIST", obj("a", {"Ready": "True"}), 2.0)
    assert t.snapshot()["a"].from_relist
    assert t.wait_all_ready(deadline=10.0, clock=lambda: 0.0, target=1)
    assert t.last_ready == 2.0


def test_parse_time() -> None:
    assert parse_time("1970-01-01T00:00:10Z") == 10.0
    assert parse_time(None) is None and parse_time("nope") is None
    assert math.isfinite(parse_time("2025-06-01T12:00:00.123456Z") or math.nan)
