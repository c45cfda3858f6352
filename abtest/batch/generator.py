"""The generator: create requests at a target rate with a cap on requests in flight.

Request i is due at ``start + i / qps``; it is sent when due and a slot is free (at most
``concurrency`` in flight), so when the API server is slower than the target the achieved
rate drops and the shortfall is visible, never hidden. A 429 or 5xx answer, or no answer, is
retried (honouring Retry-After, else backing off 50 ms doubling to 1 s) until the deadline; the
per-pod latency still starts at the first attempt. Everything runs on one asyncio loop in the
calling thread; its CPU time is measured with the thread's own CPU clock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from abtest.batch.template import RenderedPod
from abtest.cluster.client import Cluster
from abtest.cluster.poster import PodPoster

RETRYABLE = frozenset({429, 500, 502, 503, 504})


def _retryable(status: int | None) -> bool:
    return status is None or status in RETRYABLE or status >= 500


@dataclass
class CreateRecord:
    name: str
    sent: float | None = None  # monotonic, first attempt
    response: float | None = None  # monotonic, final answer
    status: int | None = None
    attempts: int = 0
    error: str | None = None


@dataclass
class SubmitResult:
    creates: list[CreateRecord]
    first_sent: float | None
    last_response: float | None
    thread_cpu_s: float
    process_cpu_s: float
    retries: int = 0
    statuses: dict[str, int] = field(default_factory=dict)


def _error_text(status: int | None, body: bytes, error: str | None) -> str | None:
    if error:
        return error
    if status is not None and 200 <= status < 300:
        return None
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = body[:300].decode("utf-8", "replace")
    return f"HTTP {status}: {message}"


async def _submit(
    cluster: Cluster,
    namespace: str,
    pods: Sequence[RenderedPod],
    bodies: Sequence[bytes],
    *,
    qps: float,
    concurrency: int,
    deadline: float,
    selector: str,
    clock: Callable[[], float],
) -> SubmitResult:
    records = [CreateRecord(p.name) for p in pods]
    async with PodPoster(cluster, namespace, limit=concurrency) as poster:
        await poster.warm(min(concurrency, len(pods)), selector)
        slots = asyncio.Semaphore(concurrency)
        tasks: list[asyncio.Task[None]] = []

        async def one(i: int) -> None:
            rec = records[i]
            try:
                while True:
                    now = clock()
                    if rec.sent is None:
                        rec.sent = now
                    rec.attempts += 1
                    answer = await poster.create(bodies[i], deadline - now)
                    rec.response = clock()
                    rec.status = answer.status
                    rec.error = _error_text(answer.status, answer.body, answer.error)
                    if not _retryable(answer.status):
                        return
                    pause = answer.retry_after_s or min(0.05 * 2 ** (rec.attempts - 1), 1.0)
                    if clock() + pause >= deadline:
                        return
                    slots.release()
                    try:
                        await asyncio.sleep(pause)
                    finally:
                        await slots.acquire()
            finally:
                slots.release()

        cpu0, proc0 = time.thread_time(), time.process_time()
        start = clock()
        for i in range(len(pods)):
            due = start + i / qps
            wait = due - clock()
            if wait > 0.0005:
                await asyncio.sleep(wait)
            await slots.acquire()
            if clock() >= deadline:
                slots.release()
                records[i].error = "not sent: round timed out before its turn"
                continue
            tasks.append(asyncio.create_task(one(i)))
        if tasks:
            await asyncio.gather(*tasks)
        cpu, proc = time.thread_time() - cpu0, time.process_time() - proc0
    sent = [r.sent for r in records if r.sent is not None]
    answered = [r.response for r in records if r.response is not None]
    statuses: dict[str, int] = {}
    for r in records:
        key = str(r.status) if r.status is not None else "none"
        statuses[key] = statuses.get(key, 0) + 1
    return SubmitResult(
        creates=records,
        first_sent=min(sent) if sent else None,
        last_response=max(answered) if answered else None,
        thread_cpu_s=cpu,
        process_cpu_s=proc,
        retries=sum(max(r.attempts - 1, 0) for r in records),
        statuses=statuses,
    )


def submit(
    cluster: Cluster,
    namespace: str,
    pods: Sequence[RenderedPod],
    *,
    qps: float,
    concurrency: int,
    deadline: float,
    selector: str,
    clock: Callable[[], float] = time.monotonic,
) -> SubmitResult:
    """Create every pod (blocking); returns per-pod sent/response times on ``clock``.

    ``deadline`` is on ``clock``; requests not yet sent by then are not sent at all.
    """
    bodies = [p.json_bytes() for p in pods]
    return asyncio.run(
        _submit(
            cluster,
            namespace,
            pods,
            bodies,
            qps=qps,
            concurrency=concurrency,
            deadline=deadline,
            selector=selector,
            clock=clock,
        )
    )
