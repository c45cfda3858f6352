"""What the pod watch saw, per pod: first-seen times of each milestone (pure, thread-safe).

The watch (abtest.cluster.pods.PodWatch) calls ``observe`` with each pod object (a plain dict
as the API server sent it) and the monotonic time the bytes arrived. Only pods named in
``expected`` are tracked; after ``freeze`` nothing changes any more (cleanup is not observed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from abtest.process.stop import checkpoint

# condition type -> attribute of PodSeen holding the first monotonic time it was seen True
MILESTONES = {
    "PodScheduled": "scheduled",
    "PodReadyToStartContainers": "ready_to_start",
    "Initialized": "initialized",
    "ContainersReady": "containers_ready",
    "Ready": "ready",
}


def parse_time(value: Any) -> float | None:
    """An RFC 3339 API timestamp as unix seconds (None when absent or malformed)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def status_write_time(meta: dict[str, Any]) -> float | None:
    """The latest managedFields time of a write to the status subresource."""
    times = [
        parse_time(entry.get("time"))
        for entry in meta.get("managedFields") or []
        if entry.get("subresource") == "status"
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


@dataclass
class PodSeen:
    scheduled: float | None = None
    ready_to_start: float | None = None
    initialized: float | None = None
    containers_ready: float | None = None
    ready: float | None = None
    ready_now: bool = False
    restarts: int = 0
    ready_regressed: int = 0
    server_created: float | None = None
    server_scheduled: float | None = None
    server_ready: float | None = None
    # when the API server stored the status update that carried Ready=True (managedFields time
    # of the kubelet's status write, one-second resolution): separates the kubelet's status
    # sync delay (server_ready -> this) from watch delivery (this -> ready)
    server_ready_written: float | None = None
    waiting_reason: str | None = None
    deleted: bool = False
    uid: str | None = None  # the pod's UID, joins it to the runtime's containers
    from_relist: bool = False  # a milestone was first seen in a re-list, not an event


class PodTracker:
    def __init__(self, expected: list[str]) -> None:
        self.expected = set(expected)
        self.pods: dict[str, PodSeen] = {}
        self.ready_count = 0
        self.last_ready: float | None = None
        self.events = 0
        self.frozen = False
        #: why the watch feeding this tracker gave up (None while it is working)
        self.aborted: str | None = None
        self._cond = threading.Condition()

    def observe(self, event_type: str, pod: dict[str, Any], seen: float) -> None:
        meta = pod.get("metadata") or {}
        name = meta.get("name")
        if name not in self.expected:
            return
        with self._cond:
            if self.frozen:
                return
            self.events += 1
            rec = self.pods.setdefault(name, PodSeen())
            if rec.server_created is None:
                rec.server_created = parse_time(meta.get("creationTimestamp"))
            if rec.uid is None and isinstance(meta.get("uid"), str):
                rec.uid = meta["uid"]
            if event_type == "DELETED":
                rec.deleted = True
                return
            relist = event_type == "RELIST"
            status = pod.get("status") or {}
            ready_true = False
            for cond in status.get("conditions") or []:
                attr = MILESTONES.get(cond.get("type", ""))
                if attr is None:
                    continue
                is_true = cond.get("status") == "True"
                if attr == "ready":
                    ready_true = is_true
                if is_true and getattr(rec, attr) is None:
                    setattr(rec, attr, seen)
                    rec.from_relist = rec.from_relist or relist
                    if attr == "scheduled":
                        rec.server_scheduled = parse_time(cond.get("lastTransitionTime"))
                    elif attr == "ready":
                        rec.server_ready = parse_time(cond.get("lastTransitionTime"))
                        rec.server_ready_written = status_write_time(meta)
                        self.ready_count += 1
                        self.last_ready = seen
            if rec.ready_now and not ready_true:
                rec.ready_regressed += 1
            rec.ready_now = ready_true
            restarts = 0
            waiting = None
            for key in ("initContainerStatuses", "containerStatuses"):
                for cs in status.get(key) or []:
                    restarts += int(cs.get("restartCount") or 0)
                    reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
                    waiting = reason or waiting
            rec.restarts = max(rec.restarts, restarts)
            if waiting:
                rec.waiting_reason = waiting
            self._cond.notify_all()

    def wait_all_ready(
        self, deadline: float, clock: Callable[[], float], target: int | None = None
    ) -> bool:
        """Block until ``target`` (default: every expected) pods were seen Ready, or until
        ``clock() >= deadline`` or the watch gave up (``abort``); True when the target was
        reached."""
        goal = len(self.expected) if target is None else target
        with self._cond:
            while self.ready_count < goal:
                left = deadline - clock()
                if left <= 0 or self.aborted is not None:
                    return False
                self._cond.wait(min(left, 0.2))
                checkpoint()  # SIGINT/SIGTERM end the wait (abtest.process.stop)
            return True

    def abort(self, reason: str) -> None:
        """The watch gave up: no more observations will come, stop waiting for them."""
        with self._cond:
            self.aborted = reason
            self._cond.notify_all()

    def freeze(self) -> None:
        with self._cond:
            self.frozen = True

    def snapshot(self) -> dict[str, PodSeen]:
        with self._cond:
            return {k: PodSeen(**vars(v)) for k, v in self.pods.items()}
