"""A batch round's result as the batch engine returns one, for the store tests."""

from __future__ import annotations

from abtest.batch.acceptance import judge
from abtest.batch.round_records import EventRecord, MetricDelta, PodRecord, RoundResult
from abtest.batch.summary import summarize


def sample_round(size: int = 7, missing: int = 0) -> RoundResult:
    """A stored-looking round of ``size`` pods, ``missing`` of them never Ready."""
    pods = []
    for i in range(size):
        sent = i * 0.001
        ready = None if i >= size - missing else sent + 1.0 + (i % 3) * 0.1
        pods.append(
            PodRecord(
                name=f"abt-x-{i:04d}",
                sent_s=sent,
                response_s=sent + 0.02,
                scheduled_s=sent + 0.05,
                ready_to_start_s=sent + 0.8,
                initialized_s=sent + 0.06,
                containers_ready_s=ready,
                ready_s=ready,
                http_status=201,
                attempts=1,
                server_created=1.7e9,
                server_scheduled=1.7e9,
                server_ready=1.7e9 + 1,
            )
        )
    verdict = judge(pods, size, timed_out=missing > 0, timeout_s=20)
    return RoundResult(
        node_name="n1", namespace="abtest", size=size, round_tag="x", started_wall=1.7e9,
        accepted=verdict.accepted, reason=verdict.reason, summary=summarize(pods, size),
        pods=pods,
        events=[EventRecord("abt-x-0000", "FailedCreatePodSandBox", "boom", 2, "Warning")],
        metric_deltas=[MetricDelta("kubelet_pod_start_sli_duration_seconds", "", 7.5, 7.0)],
        sandbox_failures=2, timed_out=missing > 0, watch_restarts=1, watch_relisted=0,
        client_cpu_s=0.002, process_cpu_s=0.003, cleanup_s=4.0, cleanup_api_s=1.0,
        cleanup_ok=True, cleanup_note=None, sandbox_baseline=0, sandbox_after=0, qps=1000.0,
        concurrency=150, timeout_s=20.0, observe_s=10.0,
    )  # fmt: skip
