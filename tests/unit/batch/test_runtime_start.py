"""The containers phase split at the runtime's start (issue 45 section 2), without a node.

The runtime's record of each container's start (CRI ``started_at`` as ``crictl inspect``
prints it, nanoseconds, the node's wall clock) is joined by pod UID to what the round's watch
saw (monotonic, since t0): ready to start seen -> runtime start -> ContainersReady seen.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from crictl_sandboxes import FakeSSH, session

from abtest.batch import runtime_start
from abtest.batch.generator import SubmitResult
from abtest.batch.record import POD_COLUMNS
from abtest.batch.round import run_round
from abtest.batch.round_records import PodRecord
from abtest.batch.spec import RoundSpec
from abtest.batch.template import RenderedPod
from abtest.config.playbook import Generator, load_profile, parse_profile
from abtest.errors import ConfigError, NodeError, UserError
from abtest.node.connection import Result
from abtest.node.container_starts import parse_ns, select_container_starts
from abtest.node.session import NodeSession
from abtest.report import tables_reference
from abtest.stats.phases import ItemChange, TimeWent
from abtest.store.db import Store
from abtest.store.schema import MIGRATIONS
from abtest.testing import FakePods

NS = "abtest"


def stamp(unix_ns: int, tz: timezone = UTC) -> str:
    """A CRI time as crictl prints it (Go's RFC3339Nano in the node's zone)."""
    dt = datetime.fromtimestamp(unix_ns // 10**9, tz)
    frac = f"{unix_ns % 10**9:09d}".rstrip("0")
    return (
        dt.strftime("%Y-%m-%dT%H:%M:%S")
        + (f".{frac}" if frac else "")
        + ("Z" if tz is UTC else dt.strftime("%z")[:3] + ":" + dt.strftime("%z")[3:])
    )


def container(
    uid: str,
    started_ns: int | None,
    *,
    name: str = "c",
    namespace: str = NS,
    attempt: int = 0,
    pod: str | None = None,
) -> dict[str, Any]:
    """One ``crictl inspect -q`` entry."""
    return {
        "status": {
            "id": f"{uid}-{name}-{attempt}",
            "metadata": {"name": name, "attempt": attempt},
            "state": "CONTAINER_RUNNING" if started_ns else "CONTAINER_CREATED",
            "startedAt": stamp(started_ns) if started_ns else "0001-01-01T00:00:00Z",
            "labels": {
                "io.kubernetes.pod.uid": uid,
                "io.kubernetes.pod.namespace": namespace,
                "io.kubernetes.pod.name": pod or f"pod-of-{uid}",
                "io.kubernetes.container.name": name,
            },
        }
    }


# --- reading crictl's JSON --------------------------------------------------------------------


def test_a_cri_time_keeps_its_nanoseconds_in_any_zone() -> None:
    ns = 1_796_310_000_123_456_789
    assert parse_ns(stamp(ns)) == ns
    assert parse_ns(stamp(ns, timezone(timedelta(hours=8)))) == ns
    assert parse_ns("2026-12-03T16:00:00Z") == 1_796_313_600 * 10**9
    # an unset CRI time (never started) and a malformed one are no time
    assert parse_ns("0001-01-01T00:00:00Z") is None
    assert parse_ns("1970-01-01T00:00:00Z") is None
    assert parse_ns("yesterday") is None


def test_each_pod_gets_its_last_container_s_first_start_in_its_namespace() -> None:
    t = 1_796_310_000 * 10**9
    out = json.dumps(
        [
            container("u1", t + 5),
            container("u2", t + 10, name="a"),
            container("u2", t + 30, name="b"),  # ContainersReady waits for the last one
            container("u2", t + 90, name="b", attempt=1),  # a restart does not move it
            container("u3", None),  # created, never started
            container("u4", t, namespace="abtest-ci"),  # a look-alike namespace
        ]
    )
    assert select_container_starts(out, NS, where="p") == {"u1": t + 5, "u2": t + 30}
    # crictl prints one object, not a list, for one container
    assert select_container_starts(json.dumps(container("u1", t)), NS, where="p") == {"u1": t}
    assert select_container_starts("[]", NS, where="p") == {}
    with pytest.raises(UserError, match="did not print JSON"):
        select_container_starts("USAGE: crictl inspect", NS, where="p")


class Shell:
    def __init__(self, out: str) -> None:
        self.out = out
        self.commands: list[str] = []

    def run_shell(self, command: str, *, sudo: bool, timeout: float) -> Result:
        self.commands.append(command)
        return Result(command, 0, self.out, "")


def _session(shell: Shell, command: str | None) -> NodeSession:
    s: NodeSession = session(FakeSSH(""))
    s.profile = dataclasses.replace(s.profile, container_starts_command=command)
    s.ssh = shell  # type: ignore[assignment]
    return s


def test_the_node_lists_the_namespace_s_containers_with_the_profile_s_command() -> None:
    t = 1_796_310_000 * 10**9
    shell = Shell(json.dumps([container("u1", t)]))
    node = _session(shell, "crictl inspect -q -a --label io.kubernetes.pod.namespace={namespace}")
    assert node.container_starts(NS) == {"u1": t}
    assert shell.commands == ["crictl inspect -q -a --label io.kubernetes.pod.namespace=abtest"]
    with pytest.raises(NodeError, match="invalid namespace"):
        node.container_starts("a;b")
    assert _session(Shell(""), None).container_starts(NS) is None  # no command: not read


# --- the join with the watch, through a round ---------------------------------------------------

READY_TO_START, STARTED, CONTAINERS_READY = 0.100, 0.130, 0.210  # seconds after each create


def seen_pod(name: str, uid: str, *conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid, "creationTimestamp": "2026-12-03T16:00:00Z"},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


class RuntimePods(FakePods):
    """Each pod is seen ready to start 100 ms after its create, its container started by the
    runtime 30 ms later (on the wall clock), ContainersReady and Ready seen 80 ms after that.
    The runtime also lists a container of an earlier pod of the same name (another UID) and
    none at all for the last pod."""

    def __init__(self) -> None:
        super().__init__(ready=False)
        self.runtime: list[dict[str, Any]] = []

    def submit(self, namespace: str, pods: Sequence[RenderedPod], **kw: Any) -> SubmitResult:
        result = super().submit(namespace, pods, **kw)
        watch = self.watches[-1]
        sent = [c.sent for c in result.creates]
        assert all(at is not None for at in sent)
        at = sent[0]
        assert at is not None
        wall_now = time.time() - (kw["clock"]() - at)  # every create was sent at once
        for i, p in enumerate(pods):
            uid = f"uid-{i}"
            watch.on_event(
                "MODIFIED", seen_pod(p.name, uid, "PodReadyToStartContainers"), at + READY_TO_START
            )
            done = ("PodReadyToStartContainers", "ContainersReady", "Ready")
            watch.on_event("MODIFIED", seen_pod(p.name, uid, *done), at + CONTAINERS_READY)
            if i < len(pods) - 1:
                self.runtime.append(container(uid, int((wall_now + STARTED) * 1e9)))
            self.runtime.append(container(f"old-{i}", int((wall_now - 60) * 1e9), pod=p.name))
        return result


class NoEvents:
    class Resp:
        data = b'{"metadata": {"resourceVersion": "1"}, "items": []}'

        def release_conn(self) -> None:
            pass

    def list_namespaced_event(self, namespace: str, **kw: Any) -> Resp:
        return self.Resp()


class Cluster:
    core = NoEvents()


def test_the_runtime_start_splits_the_containers_phase_per_pod_by_uid() -> None:
    fake = RuntimePods()
    result = run_round(
        Cluster(),  # type: ignore[arg-type]
        RoundSpec(
            node_name="n1",
            namespace=NS,
            size=3,
            run_id="r",
            generator=Generator(timeout_s=30.0, observe_s=0.0),
            scrape_metrics=False,
            container_starts=lambda: select_container_starts(
                json.dumps(fake.runtime), NS, where="fake"
            ),
        ),
        pods=fake,
    )
    joined, missing = result.pods[:2], result.pods[2]
    for p in joined:
        assert p.ready_to_start_s is not None and p.containers_ready_s is not None
        assert p.container_started_s is not None
        # the runtime's wall time and the watch's monotonic time agree to the clock anchor
        assert p.container_started_s - p.ready_to_start_s == pytest.approx(0.030, abs=0.002)
        assert p.containers_ready_s - p.container_started_s == pytest.approx(0.080, abs=0.002)
    assert missing.container_started_s is None  # the earlier pod's container never counts
    assert any("1 ContainersReady pods not listed" in n for n in result.notes)
    phases = result.summary.phases
    assert phases["container_start"] + phases["status_lag"] == pytest.approx(
        phases["containers"], abs=1e-9
    )
    deltas = {d.metric: d for d in result.metric_deltas}
    lag = deltas[runtime_start.STATUS_LAG]
    assert lag.delta_count == 2 and lag.delta_sum == pytest.approx(0.160, abs=0.004)
    assert deltas[runtime_start.CONTAINER_START].delta_count == 2


def test_a_failed_listing_is_a_note_and_leaves_the_round_unsplit() -> None:
    def failing() -> dict[str, int] | None:
        raise NodeError("crictl: connection refused")

    fake = RuntimePods()
    result = run_round(
        Cluster(),  # type: ignore[arg-type]
        RoundSpec(
            node_name="n1",
            namespace=NS,
            size=2,
            run_id="r",
            generator=Generator(timeout_s=30.0, observe_s=0.0),
            scrape_metrics=False,
            container_starts=failing,
        ),
        pods=fake,
    )
    assert all(p.container_started_s is None for p in result.pods)
    assert "status_lag" not in result.summary.phases
    assert any("connection refused" in n for n in result.notes)
    assert result.accepted


def test_runtime_deltas_are_the_sum_and_count_of_the_pods_with_both_milestones() -> None:
    pods = [
        PodRecord("a", ready_to_start_s=1.0, container_started_s=1.5, containers_ready_s=2.5),
        PodRecord("b", ready_to_start_s=1.0, container_started_s=0.75, containers_ready_s=2.0),
        PodRecord("c", ready_to_start_s=1.0, containers_ready_s=2.0),  # not listed
    ]
    got = {d.metric: (d.delta_sum, d.delta_count) for d in runtime_start.runtime_deltas(pods)}
    # b's container ran before its ready-to-start status was visible: a negative part
    assert got == {
        runtime_start.CONTAINER_START: (0.25, 2.0),
        runtime_start.STATUS_LAG: (2.25, 2.0),
    }


def test_the_report_names_what_each_status_stage_measures() -> None:
    assert tables_reference.CONTAINER_START == runtime_start.CONTAINER_START
    assert tables_reference.STATUS_LAG == runtime_start.STATUS_LAG
    label = tables_reference.stage_label
    assert label("kubelet_pod_status_sync_duration_seconds") == (
        "pod age at status write (pod_status_sync_duration)"
    )
    assert label(runtime_start.STATUS_LAG).startswith("status lag: runtime start ->")
    assert label('kubelet_run_podsandbox_duration_seconds{a="b"}') == (
        'run_podsandbox_duration{a="b"}'
    )


# --- where the listing and the starts are kept ----------------------------------------------


def _lab_profile_with(tmp_path: Path, command: str) -> Path:
    """The shipped lab profile with `command` in place of its own container_starts."""
    text = Path(load_profile("lab").source).read_text()
    text = re.sub(r"\n  container_starts: >-\n(    .*\n)+", "\n", text)
    assert "\n  container_starts:" not in text
    path = tmp_path / "p.yaml"
    path.write_text(
        text.rstrip("\n").replace(
            "\ncommands:\n", f"\ncommands:\n  container_starts: {command!r}\n"
        )
    )
    return path


def test_a_profile_s_container_listing_must_name_the_namespace(tmp_path: Path) -> None:
    good = "crictl inspect -q -a --label io.kubernetes.pod.namespace={namespace}"
    assert parse_profile(_lab_profile_with(tmp_path, good)).container_starts_command == good
    # the shipped lab profile names one (with its own crictl), so its rounds are split
    assert "{namespace}" in (load_profile("lab").container_starts_command or "")
    path = _lab_profile_with(tmp_path, "crictl inspect -q -a")
    with pytest.raises(ConfigError, match=r"no \{namespace\} placeholder") as err:
        parse_profile(path)
    assert err.value.where == f"{path}: commands.container_starts"


def test_a_v4_database_gains_the_runtime_start_of_each_pod(tmp_path: Path) -> None:
    path = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("".join(MIGRATIONS[:4]) + "\nPRAGMA user_version = 4;")
    conn.close()
    with Store(path) as store:
        columns = [row[1] for row in store.query("PRAGMA table_info(pods)")]
    assert "container_started_s" in columns
    assert set(POD_COLUMNS) <= set(columns)


def test_the_runtime_split_is_shown_for_every_arm_whatever_its_rank() -> None:
    def stage(item: str, rank: int) -> ItemChange:
        return ItemChange(
            "stage", item, 1.0, 1.0, 0.0, (-0.1, 0.1), 0.9, "paired", 3, "", None, rank
        )

    kubelet = [stage(f"kubelet_s{i}_seconds", i + 1) for i in range(4)]
    runtime = [stage(runtime_start.STATUS_LAG, 5), stage(runtime_start.CONTAINER_START, 6)]
    went = TimeWent("+g", "baseline", 10, None, False, (), (*kubelet, *runtime))  # type: ignore[arg-type]
    shown = tables_reference._shown_stages(went)
    assert [c.item for c in shown] == [
        *(c.item for c in kubelet[: tables_reference.TOP_STAGES]),
        runtime_start.STATUS_LAG,
        runtime_start.CONTAINER_START,
    ]
