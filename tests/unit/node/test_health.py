"""The Ready stage judges the node's heartbeat by the node's own clock (issue 11 item 5).

The controller's clock may be seconds off the node's: a heartbeat is "newer than the
restart" when it is newer than the node's clock read at the restart and newer than the
heartbeat seen before it. The node (SSH) and the API server are fakes here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from abtest.config.playbook import NodeProfile, load_profile
from abtest.node.connection import Result
from abtest.node.control import NodeController
from abtest.node.health import HealthFailed
from abtest.store.db import Store

CONFIG = "kind: KubeletConfiguration\n"
SKEW_S = 30.0  # this machine's clock is this far ahead of the node's
METRICS = 'kubernetes_feature_enabled{name="ContainerCheckpoint",stage="BETA"} 1\n'
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


class FakeNodeClock:
    """The node: its clock runs SKEW_S behind this machine's; the kubelet's heartbeat is
    stamped with it."""

    def __init__(self) -> None:
        self.offset = -SKEW_S
        self.restarted_at: float | None = None
        self.commands: list[str] = []

    def now(self) -> float:
        return time.time() + self.offset


class FakeSSH:
    def __init__(self, node: FakeNodeClock) -> None:
        self.node = node

    def run(self, argv: list[str], **_: Any) -> Result:
        self.node.commands.append(" ".join(argv))
        if argv[0] == "date":
            return Result("date", 0, f"{self.node.now():.9f}\n", "")
        if argv[0] == "sh":  # the healthz probe
            return Result("healthz", 0, "ok", "")
        raise AssertionError(f"unexpected command {argv}")


class FakeSession:
    def __init__(self, node: FakeNodeClock) -> None:
        self.node = node
        self.ssh = FakeSSH(node)

    def profile_command(self, command: str, **_: Any) -> Result:
        self.node.commands.append(command)
        self.node.restarted_at = self.node.now()
        return Result(command, 0, "", "")

    def close(self) -> None:
        pass


class FakeCore:
    """The API server's view of the node: Ready, with the heartbeat the kubelet wrote."""

    def __init__(self, node: FakeNodeClock, *, fresh: bool, known_before: bool = True) -> None:
        self.node = node
        self.fresh = fresh
        self.known_before = known_before
        self.old_heartbeat = node.now() - 8.0

    def read_node(self, name: str, **_: Any) -> Any:
        if self.node.restarted_at is None and not self.known_before:
            raise_cluster_error()
        if self.node.restarted_at is not None and self.fresh:
            beat = float(int(self.node.restarted_at) + 1)  # whole seconds, after the restart
        else:
            beat = self.old_heartbeat
        when = datetime.fromtimestamp(beat, UTC)
        cond = SimpleNamespace(
            type="Ready",
            status="True",
            reason="KubeletReady",
            message="",
            last_heartbeat_time=when,
            last_transition_time=when,
        )
        return SimpleNamespace(
            status=SimpleNamespace(
                conditions=[cond], node_info=SimpleNamespace(kubelet_version="v1.fake")
            )
        )

    def connect_get_node_proxy_with_path(self, node: str, path: str, **_: Any) -> Any:
        body = json.dumps({"kubeletconfig": {}}) if path == "configz" else METRICS
        return SimpleNamespace(data=body.encode())


def raise_cluster_error() -> None:
    from abtest.errors import ClusterError

    raise ClusterError("API server answered 503")


def _profile(tmp_path: Path) -> NodeProfile:
    lab = load_profile("lab")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host abtest-lab\n  HostName 127.0.0.1\n  Port 2222\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    assert lab.ssh is not None
    ssh = replace(lab.ssh, config_file=str(cfg), known_hosts=str(tmp_path / "known_hosts"))
    return replace(lab, ssh=ssh, kubeconfig=str(kubeconfig), status_command=None)


def _controller(tmp_path: Path, store: Store, core: FakeCore, node: FakeNodeClock) -> Any:
    ctl = NodeController(_profile(tmp_path), store, timeout=1.5)
    ctl.session = FakeSession(node)  # type: ignore[assignment]
    ctl.cluster = SimpleNamespace(core=core)  # type: ignore[assignment]
    return ctl


def test_controller_ahead_of_the_node_accepts_a_fresh_heartbeat(
    tmp_path: Path, store: Store
) -> None:
    node = FakeNodeClock()
    ctl = _controller(tmp_path, store, FakeCore(node, fresh=True), node)
    report, _ = ctl.restart_and_wait([], CONFIG)
    assert report.ready_s is not None and report.verified_s is not None
    assert any(c.startswith("date") for c in node.commands), "the node's clock was not read"


def test_a_stale_heartbeat_is_still_refused(tmp_path: Path, store: Store) -> None:
    node = FakeNodeClock()
    ctl = _controller(tmp_path, store, FakeCore(node, fresh=False), node)
    with pytest.raises(HealthFailed, match="not newer than the restart") as err:
        ctl.restart_and_wait([], CONFIG)
    assert err.value.stage == "ready"


def test_stale_heartbeat_refused_by_the_node_clock_alone(tmp_path: Path, store: Store) -> None:
    """No heartbeat could be read before the restart: the node's clock still decides."""
    node = FakeNodeClock()
    core = FakeCore(node, fresh=False, known_before=False)
    with pytest.raises(HealthFailed, match="not newer than the restart"):
        _controller(tmp_path, store, core, node).restart_and_wait([], CONFIG)
    node = FakeNodeClock()
    core = FakeCore(node, fresh=True, known_before=False)
    report, _ = _controller(tmp_path, store, core, node).restart_and_wait([], CONFIG)
    assert report.ready_s is not None


def test_heartbeat_fresh_uses_only_node_side_clocks() -> None:
    from abtest.node.health import heartbeat_fresh

    t = 1_700_000_000.0
    assert heartbeat_fresh(t + 1, node_restart_wall=t, heartbeat_before=t - 10) is True
    assert heartbeat_fresh(t - 0.5, node_restart_wall=t, heartbeat_before=t - 10) is True
    assert heartbeat_fresh(t - 5, node_restart_wall=t, heartbeat_before=t - 10) is False
    assert heartbeat_fresh(t + 1, node_restart_wall=t, heartbeat_before=t + 1) is False
    assert heartbeat_fresh(t + 1, node_restart_wall=None, heartbeat_before=t) is True
    assert heartbeat_fresh(t, node_restart_wall=None, heartbeat_before=t) is False
    assert heartbeat_fresh(None, node_restart_wall=t, heartbeat_before=None) is False
    assert heartbeat_fresh(t, node_restart_wall=None, heartbeat_before=None) is None


def test_parse_clock() -> None:
    from abtest.node.health import parse_clock

    assert parse_clock("1700000000.123456789\n") == pytest.approx(1700000000.123456789)
    assert parse_clock("1700000000.%N") == 1700000000.0  # busybox date
    assert parse_clock("1700000000.N\n") == 1700000000.0
    assert parse_clock("date: invalid") is None


def test_restart_in_the_same_second_as_the_previous_kubelet_asks_the_lease() -> None:
    """A rollback restart right after an apply's restart: both kubelets' heartbeats fall in
    one second, so the 1 s heartbeat cannot tell them apart; the node Lease (microseconds)
    renewed after the restart decides. (Seen on the lab: SIGTERM during an apply's restart,
    then the rollback's Ready check waited for a heartbeat that would come 5 minutes later.)"""
    from abtest.node.health import same_second_restart

    restart = 1_000.6
    hb = 1_000.0  # the previous kubelet's heartbeat, written 0.6 s before this restart
    asked: list[int] = []

    def lease(value: float | None) -> Callable[[], float | None]:
        def read() -> float | None:
            asked.append(1)
            return value

        return read

    assert same_second_restart(
        hb, node_restart_wall=restart, heartbeat_before=hb, lease_renewed=lease(1_000.9)
    )
    # the lease renewed before the restart: not proven
    assert not same_second_restart(
        hb, node_restart_wall=restart, heartbeat_before=hb, lease_renewed=lease(1_000.5)
    )
    assert not same_second_restart(
        hb, node_restart_wall=restart, heartbeat_before=hb, lease_renewed=lease(None)
    )
    asked.clear()
    # an old heartbeat: the new kubelet writes a newer second, the lease is not asked
    assert not same_second_restart(
        900.0, node_restart_wall=restart, heartbeat_before=900.0, lease_renewed=lease(1_001.0)
    )
    # a changed heartbeat is the ordinary rule's business
    assert not same_second_restart(
        1_001.0, node_restart_wall=restart, heartbeat_before=hb, lease_renewed=lease(1_001.0)
    )
    assert asked == []
