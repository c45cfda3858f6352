"""A scripted fake node for the sweep, in the spirit of ``fabric.testing``.

:class:`FakeKit` is an :class:`abtest.engine.sweep_nodes.NodeKit` over :class:`FakeNode` s.
A fake node has a kubelet config (as settings), a lock and a pending change, and records
every command the sweep makes it run (``preflight``, ``lock``, ``apply k=v``, ``restart``,
``round 10``, ``rollback``, ``restore``, ``unlock`` ...). ``node.expect(...)`` scripts
commands that must run, in order; ``node.verify()`` asserts they did and that the node is
left as found (original config, no pending change, lock free).

A node can hold the sweep in a long step - a batch round or a restart wait - the way a real
one does: it waits with :func:`abtest.process.stop.sleep`, so only a stop request ends the wait
(the hold gives up after ``HOLD_CAP_S`` and records ``...-not-stopped``, which fails
``verify``). With ``state_file`` every change is also written there as JSON, so a test can
watch a sweep running in another process (the project's tests/fake_sweep.py is one).

:class:`FakeSession` answers the engine's questions about sandboxes (none); the kit's cluster
handle is a :class:`FakeKitCluster` (just the node). :func:`fake_round` makes the
:class:`~abtest.batch.round_records.RoundResult` of a round every pod of which was Ready at once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from abtest.batch.round_records import PodRecord, RoundResult, Summary
from abtest.batch.spec import RoundSpec
from abtest.config.domain import Release, Scalar, build_version_of, release_of
from abtest.config.playbook import Generator, NodeProfile
from abtest.engine.sweep_nodes import NodeControl, PreflightSpec
from abtest.errors import ApplyFailed
from abtest.node.kubelet_build import KubeletBuild
from abtest.node.records import ApplyRecord, RestoreRecord
from abtest.process.closing import Closing
from abtest.process.stop import SignalGuard, signals_received, sleep
from abtest.store.db import Store

ALL_GATES = frozenset({"PLEGOnDemandRelist", "ContainerCheckpoint"})
#: what a fake patched build (a path naming vX.Y.Z+agc) knows besides: the agc series' gates
AGC_GATES = frozenset(
    {
        "KubeletQOSCgroupUpdateCoalescing",
        "KubeletParallelPodStatusSync",
        "KubeletPodStatusRetry",
        "KubeletSystemdCgroupCreateWithResources",
        "KubeletCgroupControllerReuse",
    }
)
HOLD_CAP_S = 120.0  # a hold nobody stops ends here (and the test fails on the record)
STEP_S = 0.02
#: what a node's state file holds of it (a test in another process reads the file)
STATE_KEYS = ("name", "original", "config", "lock_held", "pending", "phase", "calls")


class FakeNode:
    """One node: config, lock, pending change, and the log of every command run on it."""

    def __init__(
        self,
        name: str,
        *,
        original: Mapping[str, Scalar] | None = None,
        hold: str | None = None,
        restore_steps: int = 0,
        restore_until_signal: bool = False,
        failing: Mapping[str, str] | None = None,
        preflight_problems: list[str] | None = None,
        state_file: Path | None = None,
    ) -> None:
        self.name = name
        self.original: dict[str, Scalar] = dict(original or {"kubeAPIQPS": 50})
        self.config: dict[str, Scalar] = dict(self.original)
        self.hold = hold  # None | "round" | "restart": where the first visit blocks
        self.restore_steps = restore_steps  # a restore that takes a while (poll steps)
        # a restore held until a second signal arrived, so it lands inside it however late
        # a loaded machine lets the test see "restoring"
        self.restore_until_signal = restore_until_signal
        self.failing = dict(failing or {})  # setting path -> why applying it fails
        self.preflight_problems = list(preflight_problems or [])
        self.state_file = state_file
        self.lock_held = False
        self.pending = False
        self.phase = "idle"
        self.calls: list[str] = []
        self.expected: list[str] = []
        # the kubelet binary installed (None: the node's own, v1.36.3); a node whose kubelet
        # keeps reporting one version whatever runs (a swap that did not take) sets stuck_at
        self.binary: str | None = None
        self.stuck_at: str | None = None
        self.checked_known: list[bool] = []  # each apply's check_known
        self._mutex = threading.Lock()
        self._dump()

    # --- the script ---------------------------------------------------------------------

    def expect(self, *commands: str) -> FakeNode:
        """Commands that must run on this node, in this order (others may run between)."""
        self.expected.extend(commands)
        return self

    def verify(self) -> None:
        """Every scripted command ran, and the node is back as it was found."""
        calls = iter(self.calls)
        for want in self.expected:
            assert any(c == want for c in calls), (
                f"{self.name}: {want!r} not run in order; ran {self.calls}"
            )
        assert not [c for c in self.calls if c.endswith("-not-stopped")], self.calls
        assert self.config == self.original, f"{self.name}: config {self.config} left changed"
        assert not self.pending, f"{self.name}: a change is still pending"
        assert not self.lock_held, f"{self.name}: lock left held"

    def record(self, command: str, phase: str | None = None) -> None:
        with self._mutex:
            self.calls.append(command)
            if phase is not None:
                self.phase = phase
            self._dump()

    def _dump(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state()))
        os.replace(tmp, self.state_file)

    def state(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in STATE_KEYS}

    def hold_here(self, where: str) -> None:
        """Block like a long step does, until a stop request (or the cap) ends it."""
        self.record(f"{where}-waiting", phase=where)
        deadline = time.monotonic() + HOLD_CAP_S
        while time.monotonic() < deadline:
            sleep(STEP_S)
        self.record(f"{where}-not-stopped", phase="idle")


class FakeController(Closing):
    """Stands where NodeController does: lock, apply + restart (+ rollback), restore."""

    guard: SignalGuard

    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self.guard = SignalGuard()

    def close(self) -> None:
        if self.node.lock_held and not self.node.pending:
            self.node.lock_held = False
            self.node.record("unlock")
        self.node.record("close")

    def apply(
        self,
        settings: Mapping[str, Scalar],
        *,
        check_known: bool = True,
        force_restart: bool = False,
    ) -> ApplyRecord:
        node = self.node
        node.checked_known.append(check_known)
        if not node.lock_held:
            node.lock_held = True
            node.record("lock")
        node.pending = True
        node.config = dict(node.original) | dict(settings)
        node.record("apply " + ",".join(f"{k}={v}" for k, v in settings.items()), "applying")
        try:
            node.record("restart", "restarting")
            if node.hold == "restart":  # the first restart waits (for health) until stopped
                node.hold = None
                node.hold_here("restart")
            failing = [why for path, why in node.failing.items() if path in settings]
            if failing:
                raise RuntimeError(failing[0])
        except BaseException as exc:
            with self.guard.shield():  # as the real controller: a rollback is never cut
                node.config = dict(node.original)
                node.pending = False
                node.record("rollback", "idle")
            if isinstance(exc, Exception):
                raise ApplyFailed(f"{exc}; rolled back to the original config") from exc
            raise
        node.phase = "applied"
        return ApplyRecord(
            node_name=node.name,
            settings=dict(settings),
            journal_id=1,
            changed=True,
            restarted=True,
            diff="",
            original_sha256="0" * 64,
            config_sha256="1" * 64,
        )

    def restore(self) -> RestoreRecord:
        node = self.node
        with self.guard.shield():
            node.record("restore-start", "restoring")
            for _ in range(node.restore_steps):
                sleep(STEP_S)  # shielded: a signal now must not cut the restore
            if node.restore_until_signal:
                _until_second_signal(node)
            node.config = dict(node.original)
            node.pending = False
            node.record("restore", "idle")
        return RestoreRecord(node.name, True, 1, "restored", total_s=0.0)

    def has_pending_change(self) -> bool:
        return self.node.pending

    def install_kubelet_binary(self, candidate: str | None) -> str:
        self.node.record(f"binary {candidate or 'original'}")
        self.node.binary = candidate
        return "2" * 64


class FakeSession:
    """Stands where the engine's node session does (:class:`~abtest.engine.sweep_nodes.NodeAccess`):
    no sandboxes to count or remove."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node

    def __enter__(self) -> FakeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def sandbox_count(self) -> int:
        return 0

    def remove_stopped_sandboxes(self, namespace: str) -> int:
        return 0

    def clean_round_sandboxes(self, namespace: str, round_tag: str) -> int:
        return 0

    # NodeAccess asks these only for an arm with a runtime class, which a FakeKit sweep has
    # not (a test that needs them subclasses this fake)
    def runtime_handlers(self) -> frozenset[str] | None:
        raise NotImplementedError("FakeSession: no runtime handlers")

    def round_handlers(self, namespace: str, round_tag: str) -> dict[str, str] | None:
        raise NotImplementedError("FakeSession: no round handlers")

    def container_starts(self, namespace: str) -> dict[str, int] | None:
        return None  # a fake node's profile lists no container starts


@dataclasses.dataclass(frozen=True)
class FakeKitCluster:
    """What :meth:`FakeKit.cluster` hands the sweep: the node it stands for."""

    node: FakeNode


class FakeKit:
    """A NodeKit over fake nodes, by node name."""

    def __init__(self, *nodes: FakeNode, absent: tuple[str, ...] = ()) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.absent = absent  # nodes the fake API server does not know

    def cluster_nodes(self, profile: NodeProfile) -> list[str]:
        return sorted(n for n in self.nodes if n not in self.absent)

    def cluster(self, profile: NodeProfile, *, pool_size: int) -> Any:
        return FakeKitCluster(self.nodes[profile.node_name])

    def environment(self, profile: NodeProfile) -> dict[str, Any]:
        return {"node": {"node_name": profile.node_name, "fake": True}}

    def preflight(self, cluster: Any, spec: PreflightSpec, store: Any) -> list[str]:
        node = self.nodes[spec.profile.node_name]
        node.record("preflight")
        return node.preflight_problems

    def ensure_namespace(self, cluster: Any, namespace: str) -> None:
        cluster.node.record(f"namespace {namespace}")

    # asked only by a sweep with kubelet_build arms: a binary's build is in its path
    # (.../v1.35.4/kubelet, .../v1.36.3+agc/kubelet), the node's own is v1.36.3; every build
    # knows every gate, and a patched one carries a source record
    def kubelet_builds(self, profile: NodeProfile, paths: list[str]) -> dict[str, Any]:
        out = {}
        for p in paths:
            release = release_of(p) or Release(1, 36, 3)
            version = build_version_of(p) or release.version
            source = {"series": version.split("+")[1]} if "+" in version else None
            gates = ALL_GATES | (AGC_GATES if version.endswith("+agc") else frozenset())
            out[p] = KubeletBuild(p, f"Kubernetes {version}", release, gates, source)
        return out

    def api_server_version(self, cluster: Any) -> str | None:
        return "v1.36.3"

    def kubelet_version(self, cluster: Any, node_name: str) -> str:
        node = self.nodes[node_name]
        return node.stuck_at or build_version_of(node.binary or "") or "v1.36.3"

    # NodeKit asks these only for an arm with a runtime class, which a FakeKit sweep has not
    # (a test that needs them subclasses this fake)
    def runtime_class_handler(self, cluster: Any, name: str) -> str | None:
        raise NotImplementedError("FakeKit: no RuntimeClasses")

    def round_pods(self, cluster: Any, namespace: str, round_tag: str) -> list[dict[str, Any]]:
        raise NotImplementedError("FakeKit: no round pods")

    def controller(self, profile: NodeProfile, store: Store, **_: Any) -> NodeControl:
        return FakeController(self.nodes[profile.node_name])

    def session(self, profile: NodeProfile) -> FakeSession:
        return FakeSession(self.nodes[profile.node_name])

    def run_round(self, cluster: Any, spec: RoundSpec) -> RoundResult:
        # a sweep passes verify only for an arm with a runtime class (RuntimeKit's rounds)
        assert spec.verify is None, "FakeKit: a round to verify needs RuntimeKit"
        assert spec.sandbox_count is not None and spec.reap_sandboxes is not None
        assert spec.generator is not None
        node = self.nodes[spec.node_name]
        node.record(f"round {spec.size}", "round")
        if node.hold == "round":
            node.hold = None
            node.hold_here("round")
        spec.sandbox_count(), spec.reap_sandboxes()
        node.phase = "applied"
        return fake_round(spec.node_name, spec.namespace, spec.size, spec.generator)


def fake_round(
    node_name: str, namespace: str, size: int, generator: Generator, seconds: float = 1.0
) -> RoundResult:
    pods = [PodRecord(f"p{i}", sent_s=0.0, ready_s=seconds, http_status=201) for i in range(size)]
    summary = Summary(
        size=size,
        pods_ready=size,
        latencies_s=tuple(seconds for _ in pods),
        p50_s=seconds,
        p95_s=seconds,
        p99_s=seconds,
        mean_s=seconds,
        batch_ready_s=seconds,
        submit_rate=None,
        restarts=0,
        ready_regressions=0,
        create_failures=0,
        create_retries=0,
    )
    return RoundResult(
        node_name=node_name,
        namespace=namespace,
        size=size,
        round_tag="fake",
        started_wall=time.time(),
        accepted=True,
        reason=None,
        summary=summary,
        pods=pods,
        events=[],
        metric_deltas=[],
        sandbox_failures=0,
        timed_out=False,
        watch_restarts=0,
        watch_relisted=0,
        client_cpu_s=None,
        process_cpu_s=None,
        cleanup_s=0.0,
        cleanup_api_s=0.0,
        cleanup_ok=True,
        cleanup_note=None,
        sandbox_baseline=0,
        sandbox_after=0,
        qps=generator.qps,
        concurrency=generator.concurrency,
        timeout_s=generator.timeout_s,
        observe_s=generator.observe_s,
    )


def fake_profiles(like: NodeProfile, nodes: list[FakeNode]) -> tuple[NodeProfile, ...]:
    """One profile per fake node, each its own host and kubelet (as distinct real nodes)."""
    return tuple(
        dataclasses.replace(
            like,
            name=n.name,
            node_name=n.name,
            ssh=dataclasses.replace(like.ssh, host=n.name) if like.ssh else None,
            kubelet_config_path=f"/fake/{n.name}/kubelet/config.yaml",
        )
        for n in nodes
    )


def _until_second_signal(node: FakeNode, limit_s: float = 120.0) -> None:
    """Hold a shielded restore until the second signal of the run has arrived (the first
    started the restore); recorded, not hung, if it never comes."""
    deadline = time.monotonic() + limit_s
    while signals_received() < 2:
        if time.monotonic() > deadline:
            node.record("restore-no-second-signal")
            return
        sleep(STEP_S)
    node.record("second-signal-inside-restore")
