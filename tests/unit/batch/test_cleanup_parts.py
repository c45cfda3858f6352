"""The time between rounds in parts (issue 15 section 2), without a cluster: laps that add up,
the cleanup's parts, the API wait by watch (no polling), rmp races with the kubelet, the
store's v1 -> v2 migration and the parts stored per round (with the sweep's share)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from crictl_sandboxes import REMOVE, FakeSSH, listing, session, stopped_sandbox
from rounds import sample_round

from abtest.batch import round as round_mod
from abtest.batch.record import record_round
from abtest.batch.round_gaps import AFTER, BEFORE, GapPart, Laps, phase_total
from abtest.batch.round_records import RoundResult
from abtest.batch.run_record import new_run
from abtest.batch.spec import RoundSpec
from abtest.cluster import pods as pods_mod
from abtest.config.plan_options import PlanOptions
from abtest.engine.node_sweep import NodeSweep
from abtest.engine.sweep import SweepOptions
from abtest.engine.sweep_plan import build_plan
from abtest.errors import UserError
from abtest.node.session import only_removal_races
from abtest.store.db import Store
from abtest.store.schema import MIGRATIONS, SCHEMA_VERSION
from abtest.testing import FakeKit, FakeNode, FakePods


class Clock:
    """A fake monotonic clock: each read advances it by ``step``; sleeps advance it too."""

    def __init__(self, step: float = 0.01) -> None:
        self.now = 100.0
        self.step = step
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# --- laps -------------------------------------------------------------------------------------


def test_laps_add_up_and_detail_is_not_added() -> None:
    clock = Clock(step=0.5)
    laps = Laps(AFTER, clock)
    start = laps.start
    laps.lap("a")
    laps.lap("b")
    end = laps.lap("c", at=clock.now + 2.0)
    laps.detail("overlapping", 99.0)
    laps.detail("absent", None)
    assert [p.part for p in laps.parts] == ["a", "b", "c", "overlapping"]
    assert start is not None
    assert phase_total(laps.parts, AFTER) == pytest.approx(end - start)
    assert phase_total(laps.parts, BEFORE) is None


# --- cleanup ----------------------------------------------------------------------------------


def _cleanup(clock: Clock, pods: FakePods, **kw: Any) -> round_mod.CleanupResult:
    args: dict[str, Any] = {
        "sandbox_count": None,
        "sandbox_baseline": None,
        "timeout_s": 30,
        "clock": clock,
        "reap_sandboxes": None,
        "sleep": clock.sleep,
        "pods": pods,
    }
    return round_mod.cleanup(None, "abtest", "sel", **(args | kw))  # type: ignore[arg-type]


def test_cleanup_parts_add_up_to_its_time() -> None:
    pods = FakePods()
    clock = Clock()
    counts = iter([5, 3, 1])
    reaped = iter([2, 0])
    res = _cleanup(
        clock,
        pods,
        sandbox_count=lambda: next(counts),
        sandbox_baseline=1,
        reap_sandboxes=lambda: next(reaped),
    )
    assert res.ok and res.sandbox_count == 1
    # one collection call, one list (and nothing to watch)
    assert pods.calls == ["delete", "count"]
    laps = [p for p in res.parts if p.summed]
    assert [p.part for p in laps] == ["delete_call", "api_gone", "node_clean"]
    assert sum(p.seconds for p in laps) == pytest.approx(res.seconds, abs=0.05)
    detail = {p.part: p.seconds for p in res.parts if not p.summed}
    assert detail["node_polls"] == 3 and detail["sandboxes_removed"] == 2
    node_clean = next(p.seconds for p in laps if p.part == "node_clean")
    assert 0 < detail["node_commands"] <= node_clean
    # short pauses: after a removal none, when nothing was removed the idle pace
    assert clock.sleeps == [round_mod.POLL_AFTER_REMOVAL_S, round_mod.POLL_IDLE_S]


def test_pods_left_in_the_api_are_watched_not_polled() -> None:
    pods = FakePods(left=4, left_after_wait=0)
    clock = Clock()
    res = _cleanup(clock, pods)
    waited = pods.waited
    assert res.ok and res.api_s is not None
    assert len(waited) == 1 and 29 < waited[0] <= 30  # the rest of the deadline
    assert clock.sleeps == []


def test_pods_that_stay_in_the_api_fail_the_cleanup() -> None:
    pods = FakePods(left=4, left_after_wait=2)
    res = _cleanup(
        Clock(), pods, sandbox_count=lambda: pytest.fail("node asked"), sandbox_baseline=0
    )
    assert not res.ok and res.note == "2 pods still in the API after 30 s"
    assert [p.part for p in res.parts] == ["delete_call"]


# --- wait_pods_gone over a fake API -----------------------------------------------------------


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "7"}}


class FakeStream:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.released = False

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        # split mid-line, as a socket may
        yield self.body[:10]
        yield self.body[10:]

    def release_conn(self) -> None:
        self.released = True


class FakeCore:
    def __init__(self, lists: list[list[str]], streams: list[list[dict[str, Any]]]) -> None:
        self.lists, self.streams = lists, streams
        self.list_calls = 0
        self.watches: list[dict[str, Any]] = []
        self.opened: list[FakeStream] = []

    def list_namespaced_pod(self, namespace: str, **kw: Any) -> Any:
        if kw.get("watch"):
            self.watches.append(kw)
            s = FakeStream(self.streams.pop(0))
            self.opened.append(s)
            return s
        self.list_calls += 1
        names = self.lists.pop(0)
        body = {"items": [_pod(n) for n in names], "metadata": {"resourceVersion": "41"}}
        return FakeStream([body])  # _json reads .data


class FakeCluster:
    def __init__(self, core: FakeCore) -> None:
        self.core = core


@pytest.fixture()
def fake_list(monkeypatch: pytest.MonkeyPatch) -> None:
    # list_pods reads resp.data; give the fake list response one
    def data(self: FakeStream) -> bytes:
        return self.body

    monkeypatch.setattr(FakeStream, "data", property(data), raising=False)


def test_wait_pods_gone_watches_for_the_deletions(fake_list: None) -> None:
    core = FakeCore(
        lists=[["a", "b"]],
        streams=[
            [
                {"type": "MODIFIED", "object": _pod("a")},
                {"type": "DELETED", "object": _pod("a")},
                {"type": "BOOKMARK", "object": _pod("")},
                {"type": "DELETED", "object": _pod("b")},
                {"type": "DELETED", "object": _pod("never-read")},
            ]
        ],
    )
    left = pods_mod.wait_pods_gone(FakeCluster(core), "abtest", "sel", 30)  # type: ignore[arg-type]
    assert left == 0
    assert core.list_calls == 1  # one list, then the watch: no polling
    assert core.watches[0]["resource_version"] == "41"
    assert core.watches[0]["label_selector"] == "sel"
    assert core.opened[0].released


def test_wait_pods_gone_lists_again_when_the_watch_ends_or_expires(fake_list: None) -> None:
    core = FakeCore(
        lists=[["a", "b"], ["b"], []],
        streams=[
            [{"type": "DELETED", "object": _pod("a")}],  # ended before b went
            [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
        ],
    )
    left = pods_mod.wait_pods_gone(FakeCluster(core), "abtest", "sel", 30)  # type: ignore[arg-type]
    assert left == 0 and core.list_calls == 3 and len(core.watches) == 2


def test_wait_pods_gone_with_none_left_only_lists(fake_list: None) -> None:
    core = FakeCore(lists=[[]], streams=[])
    assert pods_mod.wait_pods_gone(FakeCluster(core), "abtest", "sel", 30) == 0  # type: ignore[arg-type]
    assert core.watches == []


# --- rmp racing the kubelet's own removal -----------------------------------------------------

# what crictl rmp printed on the lab while the kubelet removed the same containers
RACE = (
    'time="2026-11-30T13:39:02Z" level=warning msg="Config \\"/etc/crictl.yaml\\" does not '
    'exist, trying next: \\"/var/lib/abtest-lab/bin/crictl.yaml\\""\n'
    'removing the pod sandbox "3b25": rpc error: code = DeadlineExceeded desc = context '
    "deadline exceeded\n"
    'time="2026-11-30T12:50:01Z" level=error msg="removing the pod sandbox \\"6542ab\\": '
    'rpc error: code = NotFound desc = failed to remove container \\"1ced\\": get container '
    'info: container \\"1ced\\" in namespace \\"k8s.io\\": not found" podSandboxID="6542ab"\n'
    'removing the pod sandbox "6542ab": rpc error: code = NotFound desc = failed to remove '
    'container "1ced": get container info: container "1ced" in namespace "k8s.io": not found\n'
    'removing the pod sandbox "3ce4": rpc error: code = Unknown desc = failed to remove container '
    '"796e": failed to set removing state for container "796e": container is already in '
    "removing state\n"
)
REAL_FAILURE = (
    'removing the pod sandbox "87ca": rpc error: code = Unknown desc = failed to forcibly stop '
    'sandbox "87ca": failed to destroy network for sandbox "87ca": plugin type="loopback" '
    'failed (delete): unknown FS magic on "/var/run/netns/cni-0220": ef53\n'
)


def test_removal_races_are_told_from_real_failures() -> None:
    assert only_removal_races(RACE)
    assert not only_removal_races(RACE + REAL_FAILURE)
    assert not only_removal_races(REAL_FAILURE)
    assert not only_removal_races("")
    assert not only_removal_races('time="x" level=warning msg="Config does not exist"\n')


def test_an_rmp_that_only_raced_the_kubelet_is_not_a_failure() -> None:
    fake = FakeSSH(
        listing(stopped_sandbox(1, "abtest"), stopped_sandbox(2, "abtest")), rmp=(1, RACE)
    )
    # crictl printed no "Removed sandbox" line: nothing is claimed removed
    assert session(fake).remove_stopped_sandboxes("abtest") == 0
    assert len(fake.removals) == 1 and fake.removals[0].startswith(REMOVE.split("{")[0])


# --- the store ------------------------------------------------------------------------------


def test_a_v1_database_migrates_and_keeps_its_rounds(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + "\nPRAGMA user_version = 1;")
    conn.execute(
        "INSERT INTO runs (id, kind, created_at, status) VALUES ('r1', 'batch', 'now', 'finished')"
    )
    conn.execute(
        "INSERT INTO rounds (run_id, node_name, arm, size, ordinal, started_wall, accepted, "
        "pods_ready, cleanup_s) VALUES ('r1', 'n1', 'as-is', 5, 1, 1.0, 1, 5, 3.5)"
    )
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION >= 4
        row = store.rounds_frame("r1").iloc[0]
        assert row["cleanup_s"] == 3.5
        assert row["gap_before_s"] is None or row["gap_before_s"] != row["gap_before_s"]
        assert store.query("SELECT COUNT(*) FROM round_gaps")[0][0] == 0
    with Store(path) as again:  # opening a migrated database again changes nothing
        assert again.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION


def test_a_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(UserError, match=f"schema v{SCHEMA_VERSION + 1}"):
        Store(path)


def _with_parts(r: RoundResult, entered: float, returned: float) -> RoundResult:
    parts = [
        GapPart(BEFORE, "setup", 0.1),
        GapPart(BEFORE, "first_create", 0.2),
        GapPart(AFTER, "delete_call", 0.3),
        GapPart(AFTER, "node_clean", 1.5),
        GapPart(AFTER, "node_polls", 7.0, summed=False),
    ]
    return dataclasses.replace(r, gap_parts=parts, entered_mono=entered, returned_mono=returned)


def test_record_round_stores_the_parts_and_the_sweeps_share(store: Store) -> None:
    run_id = new_run(store, "batch", command="test")
    first = _with_parts(sample_round(), entered=10.0, returned=20.0)
    second = _with_parts(sample_round(), entered=20.25, returned=30.0)
    record_round(store, run_id, first)
    rid = record_round(store, run_id, second, previous=first)
    rows = store.query(
        "SELECT phase, seq, part, seconds, summed FROM round_gaps WHERE round_id = ? "
        "ORDER BY phase DESC, seq",
        (rid,),
    )
    got = [(r["phase"], r["seq"], r["part"], r["seconds"], r["summed"]) for r in rows]
    assert got == [
        ("before", 1, "sweep", pytest.approx(0.25), 1),
        ("before", 2, "setup", 0.1, 1),
        ("before", 3, "first_create", 0.2, 1),
        ("after", 1, "delete_call", 0.3, 1),
        ("after", 2, "node_clean", 1.5, 1),
        ("after", 3, "node_polls", 7.0, 0),
    ]
    frame = store.rounds_frame(run_id)
    assert frame["gap_before_s"].tolist() == pytest.approx([0.3, 0.55])
    assert frame["gap_after_s"].tolist() == pytest.approx([1.8, 1.8])


class TimedKit(FakeKit):
    """The fake node's rounds, with the monotonic times a real round carries."""

    def __init__(self, *nodes: FakeNode) -> None:
        super().__init__(*nodes)
        self.t = 0.0

    def run_round(self, cluster: Any, spec: RoundSpec) -> RoundResult:
        result = super().run_round(cluster, spec)
        self.t += 1.0
        entered = self.t
        self.t += 10.0
        return _with_parts(result, entered=entered, returned=self.t)


def test_the_sweep_gives_each_round_the_one_before_it_in_its_visit(store: Store) -> None:
    plan = build_plan(
        PlanOptions(playbook="lab-sweep", rounds=1, sizes=(10, 20), seed=7, design="baseline")
    )
    run_id = new_run(store, "sweep", command="test", node_name="abtest-lab", plan=plan.to_dict())
    node = FakeNode("abtest-lab")
    worker = NodeSweep(
        plan,
        plan.profiles[0],
        store,
        run_id,
        SweepOptions(),
        lambda *a: None,
        threading.Event(),
        TimedKit(node),
    )
    assert worker.run().status == "finished"
    rows = store.query(
        "SELECT r.visit_id, g.part, g.seconds FROM round_gaps g JOIN rounds r ON r.id = g.round_id "
        "WHERE r.run_id = ? AND g.part = 'sweep'",
        (run_id,),
    )
    visits = store.query("SELECT COUNT(*) FROM visits WHERE run_id = ?", (run_id,))[0][0]
    rounds = store.query("SELECT COUNT(*) FROM rounds WHERE run_id = ?", (run_id,))[0][0]
    # every round but each visit's first has the sweep's share (1 s in the timed fake)
    assert len(rows) == rounds - visits > 0
    assert all(r["seconds"] == pytest.approx(1.0) for r in rows)
