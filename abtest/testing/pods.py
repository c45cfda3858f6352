"""A round's pods without an API server: :class:`FakePods` is an
:class:`abtest.batch.round_pods.RoundPods` that records what the round asked.

Every create is accepted at once (HTTP 201, one attempt) and, with ``ready=True``, the pod is
reported Ready through the round's :class:`FakeWatch` at that moment. After the delete the API
server lists ``left`` pods, and ``left_after_wait`` once the round waited for them. A test that
needs more (events written as pods come and go, a real watch) subclasses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Unpack

from abtest.batch.generator import CreateRecord, SubmitResult
from abtest.batch.round_pods import SubmitTerms, WatchTerms
from abtest.batch.template import RenderedPod
from abtest.cluster.pods import OnEvent
from abtest.errors import AbtestError


def ready_pod(name: str) -> dict[str, Any]:
    """A pod object as a watch event carries it, Ready."""
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-11-30T20:00:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class FakeWatch:
    """A :class:`~abtest.batch.round_pods.RoundWatch` that never drops: it tells the round
    what :meth:`ready` is told."""

    def __init__(self, on_event: OnEvent, on_failure: Callable[[str], None] | None = None):
        self.on_event = on_event
        self.on_failure = on_failure
        self.error: AbtestError | None = None
        self.restarts = 0
        self.relists = 0
        self.last_error: str | None = None
        self.started = False
        self.stopped = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def ready(self, name: str, at: float) -> None:
        """Pod ``name`` was seen Ready at ``at`` (on the round's clock)."""
        self.on_event("MODIFIED", ready_pod(name), at)


class FakePods:
    """The API server's side of a round's pods, scripted; ``calls`` logs each method asked
    (``check_owned``, ``watch``, ``submit``, ``delete``, ``count``, ``wait_gone``)."""

    def __init__(self, *, left: int = 0, left_after_wait: int = 0, ready: bool = True) -> None:
        self.left = left  # pods the API server still lists right after the delete
        self.left_after_wait = left_after_wait  # ... and once the round waited for them
        self.ready = ready  # report every created pod Ready at once
        self.calls: list[str] = []
        self.created: list[str] = []  # pod names, in create order
        self.deleted: list[str] = []  # the selector of each delete
        self.waited: list[float] = []  # the timeout of each wait for the pods to be gone
        self.watches: list[FakeWatch] = []

    def check_owned(self, namespace: str) -> None:
        self.calls.append("check_owned")

    def submit(
        self, namespace: str, pods: Sequence[RenderedPod], **terms: Unpack[SubmitTerms]
    ) -> SubmitResult:
        self.calls.append("submit")
        now = terms["clock"]()
        creates = []
        for p in pods:
            self.created.append(p.name)
            creates.append(CreateRecord(p.name, sent=now, response=now, status=201, attempts=1))
            if self.ready and self.watches:
                self.watches[-1].ready(p.name, now)
        return SubmitResult(creates, now, now, 0.0, 0.0)

    def watch(
        self, namespace: str, selector: str, on_event: OnEvent, **terms: Unpack[WatchTerms]
    ) -> FakeWatch:
        self.calls.append("watch")
        watch = FakeWatch(on_event, terms["on_failure"])
        self.watches.append(watch)
        return watch

    def delete(self, namespace: str, selector: str) -> None:
        self.calls.append("delete")
        self.deleted.append(selector)

    def count(self, namespace: str, selector: str) -> int:
        self.calls.append("count")
        return self.left

    def wait_gone(self, namespace: str, selector: str, timeout_s: float) -> int:
        self.calls.append("wait_gone")
        self.waited.append(timeout_s)
        return self.left_after_wait
