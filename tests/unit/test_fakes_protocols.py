"""The shipped fakes (abtest.testing) and the real parts implement the same protocols: mypy
checks each assignment below, and the fakes answer as their protocol says."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.batch.round_pods import ClusterPods, RoundPods, RoundWatch
from abtest.cluster.client import Cluster
from abtest.engine.sweep_nodes import NodeAccess, NodeControl, NodeKit
from abtest.node.connection import Connection
from abtest.node.pod_transport import PodConnection
from abtest.node.ssh import Connection as SSHConnection
from abtest.testing import (
    FakeConnection,
    FakeController,
    FakeHost,
    FakeKit,
    FakeNode,
    FakePods,
    FakeSession,
    FakeWatch,
)


def _real_connection(c: SSHConnection) -> Connection:
    return c  # the paramiko connection is a Connection


def _pod_connection(c: PodConnection) -> Connection:
    return c  # so is the connection through a pod (transport: pod)


def _real_pods(cluster: Cluster) -> RoundPods:
    return ClusterPods(cluster)


def _real_watch(pods: ClusterPods) -> RoundWatch:
    return pods.watch(
        "ns",
        "sel",
        lambda kind, obj, at: None,
        server_timeout_s=1,
        clock=lambda: 0.0,
        start_resource_version=None,
        on_failure=lambda why: None,
    )


def test_the_fake_connection_is_a_connection(tmp_path: Path) -> None:
    conn: Connection = FakeConnection(FakeHost(tmp_path / "host"))
    assert conn.connected and conn.endpoint.describe() == conn.endpoint.alias
    assert conn.run(["echo", "hi"]).check("echo").stdout == "hi\n"
    assert conn.stat(str(tmp_path / "absent")) is None


def test_the_fake_node_parts_are_the_engines_protocols() -> None:
    node = FakeNode("n1")
    kit: NodeKit = FakeKit(node)
    control: NodeControl = FakeController(node)
    access: NodeAccess = FakeSession(node)
    assert kit.cluster_nodes is not None and control.has_pending_change() is False
    assert access.sandbox_count() == 0


def test_the_fake_pods_are_a_rounds_pods() -> None:
    pods: RoundPods = FakePods(left=2, left_after_wait=1)
    seen: list[str] = []
    watch = pods.watch(
        "ns",
        "sel",
        lambda kind, obj, at: seen.append(obj["metadata"]["name"]),
        server_timeout_s=1,
        clock=lambda: 0.0,
        start_resource_version=None,
        on_failure=lambda why: None,
    )
    assert isinstance(watch, FakeWatch)
    watch.ready("p1", 1.0)
    assert seen == ["p1"]
    assert pods.count("ns", "sel") == 2 and pods.wait_gone("ns", "sel", 5.0) == 1


def test_the_documented_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    section = doc[doc.index("## Fakes for tests") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("```\n", start)]
    exec(compile(code, "docs/python-api.md", "exec"), {"tmp": tmp_path})
    assert capsys.readouterr().out == "0\n"
