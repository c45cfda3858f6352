"""The gap between rounds, cut further (issue 15 section 2), without a cluster or a node.

- The round's events are listed as of one resourceVersion read before anything is deleted,
  in a thread that runs while the pods are deleted and the node is cleaned: what the round
  stores is what a listing at that moment held (not the deletion's own events), the wait for
  the listing is a lap of the gap and the listing's own time overlapping detail.
- A round's running sandboxes are stopped by several ``sandbox_stop`` commands at once (crictl
  stops its ids one after another), each naming only checked ids of this round, and nothing
  is removed unless every one of them stopped.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import urllib3
from crictl_sandboxes import DECOYS, FakeSSH, listing, sandbox, session, sid
from scipy import stats

from abtest.batch import start_phase
from abtest.batch.collect import EventsListing
from abtest.batch.generator import SubmitResult
from abtest.batch.round import run_round
from abtest.batch.round_gaps import AFTER, BEFORE, phase_total
from abtest.batch.round_records import EventRecord
from abtest.batch.spec import RoundSpec
from abtest.batch.template import RenderedPod
from abtest.cluster import pods
from abtest.config.playbook import Generator
from abtest.errors import ClusterError, NodeError
from abtest.node import session as session_mod
from abtest.node.connection import Result
from abtest.node.session import STOP_COMMANDS_AT_ONCE, split_ids
from abtest.process import stop as stopping
from abtest.testing import FakePods

# --- the API side: events as of one resourceVersion ------------------------------------------


class Resp:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()

    def release_conn(self) -> None:
        pass


def event(name: str, pod: str, reason: str, count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": pod},
        "reason": reason,
        "message": f"{reason} {pod}",
        "count": count,
        "type": "Normal",
    }


class EventStore:
    """A namespace's pod events with resourceVersions, as the API server keeps them: a list
    at an exact resourceVersion returns them as they were then (an event written later is
    absent, one updated later has its old count)."""

    def __init__(self) -> None:
        self.rv = 100
        self.history: list[tuple[int, dict[str, Any]]] = []  # (rv, the event as of rv)
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.hold: threading.Event | None = None  # an exact listing waits for it
        self.held_until_set: bool | None = None

    def write(self, ev: dict[str, Any]) -> None:
        with self.lock:
            self.rv += 1
            self.history.append((self.rv, json.loads(json.dumps(ev))))

    def at(self, rv: int) -> list[dict[str, Any]]:
        latest: dict[str, dict[str, Any]] = {}
        for at, ev in self.history:
            if at <= rv:
                latest[ev["metadata"]["name"]] = ev
        return list(latest.values())

    def list_namespaced_event(self, namespace: str, **kw: Any) -> Resp:
        with self.lock:
            self.calls.append(kw)
            now = self.rv
        if kw.get("limit") == 1:
            return Resp({"metadata": {"resourceVersion": str(now)}, "items": self.at(now)[:1]})
        if kw.get("resource_version") is not None:
            assert kw.get("resource_version_match") == "Exact"
            if self.hold is not None:
                self.held_until_set = self.hold.wait(10)
            return Resp({"metadata": {}, "items": self.at(int(kw["resource_version"]))})
        return Resp({"metadata": {"resourceVersion": str(now)}, "items": self.at(now)})


class FakeCluster:
    def __init__(self, core: Any) -> None:
        self.core = core


def test_the_version_is_read_with_a_one_item_list() -> None:
    store = EventStore()
    store.write(event("e1", "p1", "Scheduled"))
    assert pods.pod_events_version(FakeCluster(store), "abtest") == "101"  # type: ignore[arg-type]
    (call,) = store.calls
    assert call["limit"] == 1 and call["field_selector"] == "involvedObject.kind=Pod"
    assert call["_request_timeout"] is not None


def test_an_exact_listing_holds_the_events_as_they_were_then() -> None:
    store = EventStore()
    store.write(event("e1", "p1", "Scheduled"))
    store.write(event("e2", "p1", "BackOff", count=1))
    cluster: Any = FakeCluster(store)
    rv = pods.pod_events_version(cluster, "abtest")
    store.write(event("e2", "p1", "BackOff", count=3))  # updated since
    store.write(event("e3", "p1", "Killing"))  # written since
    got = pods.list_pod_events(cluster, "abtest", {"p1"}, resource_version=rv)
    assert [(e["reason"], e["count"]) for e in got] == [("Scheduled", 1), ("BackOff", 1)]
    assert store.calls[-1]["resource_version"] == rv
    assert store.calls[-1]["_request_timeout"] is not None
    # without one: as now (as before)
    now = pods.list_pod_events(cluster, "abtest", {"p1"})
    assert [(e["reason"], e["count"]) for e in now] == [
        ("Scheduled", 1),
        ("BackOff", 3),
        ("Killing", 1),
    ]


def test_a_failed_listing_is_raised_by_result_not_dropped() -> None:
    class Failing(EventStore):
        def list_namespaced_event(self, namespace: str, **kw: Any) -> Resp:
            if kw.get("limit") == 1:
                return super().list_namespaced_event(namespace, **kw)
            raise urllib3.exceptions.ProtocolError("connection reset")

    listing_ = EventsListing(FakeCluster(Failing()), "abtest", {"p1"})  # type: ignore[arg-type]
    with pytest.raises(ClusterError, match="connection reset"):
        listing_.result()
    assert listing_.seconds is not None


# --- the round: events as of before the delete, listed while the cleanup runs ----------------


class EventPods(FakePods):
    """The round's pods on an event store: each pod gets Scheduled and Started events when
    it is created (and is reported Ready); the delete writes a Killing event per pod (as the
    kubelet does) and lets a held exact listing go on."""

    def __init__(self, store: EventStore) -> None:
        super().__init__()
        self.store = store
        self.deleted_event = threading.Event()
        store.hold = self.deleted_event

    def submit(self, namespace: str, pods: Sequence[RenderedPod], **kw: Any) -> SubmitResult:
        for p in pods:
            self.store.write(event(f"{p.name}.s", p.name, "Scheduled"))
            self.store.write(event(f"{p.name}.t", p.name, "Started"))
        return super().submit(namespace, pods, **kw)

    def delete(self, namespace: str, selector: str) -> None:
        super().delete(namespace, selector)
        for n in self.created:
            self.store.write(event(f"{n}.k", n, "Killing"))
        self.deleted_event.set()


@pytest.fixture()
def fake_round() -> EventPods:
    """run_round against an event store (EventPods), with an earlier round's event in it."""
    store = EventStore()
    store.write(event("old", "p-of-an-earlier-round", "Started"))
    return EventPods(store)


def _run(fake: EventPods, start_dither_s: float = 0.0) -> Any:
    return run_round(
        FakeCluster(fake.store),  # type: ignore[arg-type]
        RoundSpec(
            node_name="n1",
            namespace="abtest",
            size=3,
            run_id="r",
            generator=Generator(timeout_s=30.0, observe_s=0.0, start_dither_s=start_dither_s),
            scrape_metrics=False,
        ),
        pods=fake,
    )


def test_the_round_stores_its_events_as_of_before_the_delete(fake_round: EventPods) -> None:
    result = _run(fake_round)
    names = [p.name for p in result.pods]
    want = [
        EventRecord(n, r, f"{r} {n}", 1, "Normal") for n in names for r in ("Scheduled", "Started")
    ]
    # neither the deletion's Killing events nor the earlier round's
    assert sorted(result.events, key=repr) == sorted(want, key=repr)


def test_the_events_listing_runs_while_the_pods_are_deleted(fake_round: EventPods) -> None:
    result = _run(fake_round)
    # the listing (held until the delete) was in flight when the delete happened
    assert fake_round.store.held_until_set is True
    assert len(result.events) == 6
    after = [p for p in result.gap_parts if p.phase == AFTER]
    laps = [p.part for p in after if p.summed]
    assert laps == [
        "watch_stop",
        "events",
        "metrics_after",
        "judge",
        "delete_call",
        "api_gone",
        "events_wait",
    ]
    detail = {p.part: p.seconds for p in after if not p.summed}
    assert detail["events_list"] >= 0
    assert phase_total(result.gap_parts, AFTER) == pytest.approx(
        sum(p.seconds for p in after if p.summed)
    )


def test_a_failed_events_listing_fails_the_round_after_its_cleanup(
    fake_round: EventPods, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_list = fake_round.store.list_namespaced_event

    def failing(namespace: str, **kw: Any) -> Resp:
        if kw.get("resource_version") is not None:
            raise urllib3.exceptions.ProtocolError("connection reset")
        return real_list(namespace, **kw)

    monkeypatch.setattr(fake_round.store, "list_namespaced_event", failing)
    with pytest.raises(ClusterError, match="connection reset") as info:
        _run(fake_round)
    assert fake_round.deleted  # the pods were deleted all the same
    assert not any("failed too" in n for n in getattr(info.value, "__notes__", []))


# --- the node side: stops at once, in shares ---------------------------------------------------


def test_ids_are_split_into_nearly_equal_shares_in_order() -> None:
    ids = [sid(i) for i in range(10)]
    shares = split_ids(ids, 4)
    assert [len(s) for s in shares] == [3, 3, 2, 2]
    assert [i for s in shares for i in s] == ids
    assert split_ids(ids[:2], 4) == [(ids[0],), (ids[1],)]
    assert split_ids([], 4) == []
    assert split_ids(ids, 1) == [tuple(ids)]


class ConcurrentSSH(FakeSSH):
    """FakeSSH whose stop commands wait for each other: they pass only if they all run at
    once (a barrier), else the barrier breaks and the stop fails."""

    def __init__(self, out: str, parties: int, **kw: Any) -> None:
        super().__init__(out, **kw)
        self.barrier = threading.Barrier(parties)
        self.lock = threading.Lock()
        self.met = True

    def run_shell(self, command: str, *, sudo: bool, timeout: float) -> Result:
        if command.startswith("crictl stopp"):
            try:
                self.barrier.wait(10)
            except threading.BrokenBarrierError:
                self.met = False
        with self.lock:
            return super().run_shell(command, sudo=sudo, timeout=timeout)


def test_a_big_rounds_sandboxes_are_stopped_by_several_commands_at_once() -> None:
    boxes = [sandbox(i) for i in range(20, 170)]  # 150 running
    fake = ConcurrentSSH(listing(*boxes, sandbox(5, state="SANDBOX_NOTREADY"), *DECOYS), 4)
    assert STOP_COMMANDS_AT_ONCE == 4
    assert session(fake).clean_round_sandboxes("abtest", "0a1b2c3d4e") == 151
    assert fake.met, "the stop commands did not run at the same time"
    verbs = [c.split()[1] for c in fake.commands]
    assert verbs[0] == "pods" and verbs[-1] == "rmp" and verbs.count("stopp") == 4
    stopped = [i for ids in fake.ids_in("stopp") for i in ids]
    assert sorted(stopped) == sorted(sid(i) for i in range(20, 170))  # each once
    assert len(stopped) == len(set(stopped))
    assert sorted(fake.ids_in("rmp")[0]) == sorted([*stopped, sid(5)])
    decoy_ids = {d["id"] for d in DECOYS}
    assert not decoy_ids & {i for c in fake.commands for i in c.split()}


def test_a_share_that_raced_the_kubelet_means_nothing_is_removed_this_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = 'E1130 rpc error: code = NotFound desc = an error occurred when try to find sandbox "x"'
    fake = FakeSSH(listing(*(sandbox(i) for i in range(1, 9))))
    real = fake.run_shell

    def one_share_races(command: str, *, sudo: bool, timeout: float) -> Result:
        if command.startswith("crictl stopp") and sid(1) in command:
            fake.commands.append(command)
            return Result(command, 1, "", err)
        return real(command, sudo=sudo, timeout=timeout)

    monkeypatch.setattr(fake, "run_shell", one_share_races)
    assert session(fake).clean_round_sandboxes("abtest", "0a1b2c3d4e") == 0
    assert len(fake.ids_in("stopp")) == 4 and fake.ids_in("rmp") == []


def test_a_share_that_really_failed_is_a_node_error_and_nothing_is_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = 'E1130 rpc error: code = NotFound desc = sandbox "x"'
    fake = FakeSSH(listing(*(sandbox(i) for i in range(1, 9))))
    real = fake.run_shell

    def failing(command: str, *, sudo: bool, timeout: float) -> Result:
        if command.startswith("crictl stopp") and sid(1) in command:
            fake.commands.append(command)
            return Result(command, 1, "", "permission denied")
        if command.startswith("crictl stopp") and sid(8) in command:
            fake.commands.append(command)
            return Result(command, 1, "", err)  # a race in another share changes nothing
        return real(command, sudo=sudo, timeout=timeout)

    monkeypatch.setattr(fake, "run_shell", failing)
    with pytest.raises(NodeError, match="permission denied"):
        session(fake).clean_round_sandboxes("abtest", "0a1b2c3d4e")
    assert fake.ids_in("rmp") == []


def test_a_small_round_is_stopped_by_one_command_per_sandbox() -> None:
    fake = FakeSSH(listing(sandbox(1), sandbox(2)))
    assert session(fake).clean_round_sandboxes("abtest", "0a1b2c3d4e") == 2
    assert sorted(fake.ids_in("stopp")) == [[sid(1)], [sid(2)]]
    assert session_mod.split_ids([sid(1)], STOP_COMMANDS_AT_ONCE) == [(sid(1),)]


# seen on the lab (20-pod rounds, 3 of 5): the kubelet's own stop of the same sandbox tore its
# network down first; before, this counted as a failed removal and paused the cleanup 0.5 s
CNI_RACE = (
    'time="2026-11-30T20:00:32Z" level=error msg="StopPodSandbox for \\"b98b\\" failed" '
    'error="failed to destroy network for sandbox \\"b98b\\": plugin type=\\"bridge\\" failed '
    '(delete): failed to delete \\"eth0\\": no such device" podSandboxID="b98b"\n'
    'time="2026-11-30T20:00:32Z" level=fatal msg="stopping the pod sandbox \\"b98b\\": rpc '
    'error: code = Unknown desc = failed to destroy network for sandbox \\"b98b\\": plugin '
    'type=\\"bridge\\" failed (delete): failed to delete \\"eth0\\": no such device"\n'
)


def test_a_stop_whose_network_was_torn_down_by_the_kubelet_is_a_race() -> None:
    assert session_mod.only_removal_races(CNI_RACE)
    assert not session_mod.only_removal_races(
        'level=fatal msg="failed to destroy network: plugin type=\\"bridge\\" failed (delete): '
        'permission denied"'
    )
    fake = FakeSSH(listing(sandbox(1)), stop=(1, CNI_RACE))
    assert session(fake).clean_round_sandboxes("abtest", "0a1b2c3d4e") == 0  # no NodeError
    assert fake.ids_in("rmp") == []  # and nothing removed this pass


# --- the random start (abtest.batch.start_phase) ----------------------------------------------


@pytest.mark.parametrize("width", [0.0, 0.3])
def test_the_first_create_waits_a_random_part_of_the_width_after_the_watch_opens(
    fake_round: EventPods, width: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(stopping, "sleep", slept.append)
    result = _run(fake_round, width)
    before = [p.part for p in result.gap_parts if p.phase == BEFORE and p.summed]
    if width:
        (delay,) = slept
        assert 0.0 <= delay < width
        assert before[-3:] == ["watch_open", "start_dither", "first_create"]
    else:  # 0 turns it off: no wait, no lap
        assert slept == [] and before[-2:] == ["watch_open", "first_create"]


def test_the_start_delays_are_uniform_over_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Uniform over a whole relist period makes the batch's phase of the tick uniform, whatever
    the kubelet's own phase: (offset + delay) mod 1 for a fixed offset is uniform too."""
    monkeypatch.setattr(stopping, "sleep", lambda _: None)
    delays = np.array([start_phase.wait_random_phase(1.0) for _ in range(4000)])
    assert delays.min() >= 0.0 and delays.max() < 1.0
    # a fixed or narrow delay (the defect this prevents) fails both at p < 1e-6
    assert stats.kstest(delays, "uniform").pvalue > 1e-6
    phases = np.mod(0.93 + delays, 1.0)
    assert stats.kstest(phases, "uniform").pvalue > 1e-6
