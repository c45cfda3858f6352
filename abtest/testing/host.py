"""A scripted fake node for :class:`~abtest.node.control.NodeController`, below the SSH seam.

Where :mod:`abtest.testing.node` fakes the controller, this fakes the node under the real one:
:class:`FakeConnection` implements :class:`abtest.node.connection.Connection` and the
controller's :class:`~abtest.node.session.NodeSession` runs over it unchanged.

:class:`FakeHost` is one node on this machine: its kubelet config, binary and lock are files
in a directory, and the controller's remote scripts (atomic write, backup, marker, lock)
really run on them with ``subprocess``. What a real node would answer about its kubelet is
scripted: the profile's restart / status / log / pid commands, the healthz probe and the
kubelet's command line over SSH, and Ready, ``/configz`` and the feature-gate metric through
:class:`FakeCluster` (the API server's view). A restart reads the config file and the binary
as the controller left them, so what the "kubelet" runs is what was written.

In the spirit of ``fabric.testing``: ``host.expect(...)`` scripts commands that must run, in
order; ``host.fail("restart")`` makes the next one fail; ``host.verify()`` asserts every
scripted command ran and the node is as it was found (config and binary byte-identical, no
backup, marker, temp file or lock, the kubelet running the original config).

Scripted faults: ``ignores`` (paths the kubelet silently does not take: they stay at their
default, so a setting is "not in effect"), ``flags`` (kubelet command-line flags, which win
over the file), a binary that exits non-zero (a candidate that does not start), a gate the
kubelet does not know (it refuses to start, as the real one does), and ``fail_when``: any
command on the node failing unrun (a full disk under one of the remote scripts).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import shlex
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from abtest.config.playbook import NodeProfile, SSHTarget, load_profile
from abtest.errors import NodeError
from abtest.node.connection import Commands, FileStat, Result
from abtest.node.control import NodeController
from abtest.node.session import NodeSession
from abtest.store.db import Store
from abtest.testing.node import FakeKit, FakeNode

CONFIG = b"""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzPort: 10248
kubeAPIQPS: 50
featureGates:
  ContainerCheckpoint: false
"""
GOOD_KUBELET = b"#!/bin/sh\n# the original kubelet\nexit 0\n"
BAD_KUBELET = b"#!/bin/sh\necho 'unrecognized flag: this build will not start' >&2\nexit 1\n"
#: what the kubelet runs with where its config file says nothing
DEFAULTS: dict[str, Any] = {
    "kubeAPIQPS": 50,
    "kubeAPIBurst": 100,
    "maxPods": 110,
    "serializeImagePulls": True,
    "imageGCHighThresholdPercent": 85,
}
GATES = {"ContainerCheckpoint": True, "PLEGOnDemandRelist": True}
PID = 4242
NODE = "fake-host"


class FakeHost:
    """The node: files under ``root``, a scripted kubelet, the log of what ran on it."""

    def __init__(
        self,
        root: Path,
        *,
        name: str = NODE,
        config: bytes = CONFIG,
        ignores: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
    ) -> None:
        self.root, self.name = root, name
        (root / "bin").mkdir(parents=True)
        self.config_path = root / "config.yaml"
        self.binary_path = root / "bin" / "kubelet"
        self.lock_path = root / "node.lock"
        self.config_path.write_bytes(config)
        self.binary_path.write_bytes(GOOD_KUBELET)
        self.binary_path.chmod(0o750)
        self.original = config
        self.ignores = set(ignores)
        self.flags = flags
        self.calls: list[str] = []
        self.expected: list[str] = []
        self.failing: dict[str, int] = {}  # command -> how many of its next runs fail
        self.failing_when: list[tuple[Callable[[list[str]], bool], str]] = []
        self.running = False
        self.running_config: dict[str, Any] = {}
        self.running_gates: dict[str, bool] = {}
        self.heartbeat = float(int(time.time()))
        self.log: list[str] = []
        self._start()

    # --- the script ---------------------------------------------------------------------

    def expect(self, *commands: str) -> FakeHost:
        """Commands that must run, in this order (others may run between)."""
        self.expected.extend(commands)
        return self

    def fail(self, command: str, times: int = 1) -> FakeHost:
        """The next ``times`` runs of ``command`` (restart, status, healthz, pid) fail."""
        self.failing[command] = times
        return self

    def fail_when(self, matches: Callable[[list[str]], bool], stderr: str) -> FakeHost:
        """Every command whose argv ``matches`` fails unrun, saying ``stderr``."""
        self.failing_when.append((matches, stderr))
        return self

    def verify(self) -> None:
        """Every scripted command ran in order; the node is back as it was found."""
        calls = iter(self.calls)
        for want in self.expected:
            assert any(c == want for c in calls), f"{want!r} not run in order; ran {self.calls}"
        assert self.config_path.read_bytes() == self.original, "the config was left changed"
        assert self.binary_path.read_bytes() == GOOD_KUBELET, "the binary was left changed"
        assert self.files() == {"config.yaml", "bin", "bin/kubelet"}, self.files()
        assert self.running, f"the kubelet is not running; log: {self.log[-3:]}"
        assert self.running_config == self._effective(self.original)[0]

    def files(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*")}

    def _record(self, command: str) -> bool:
        """Log ``command``; False when the script says this run fails."""
        self.calls.append(command)
        left = self.failing.get(command, 0)
        if left:
            self.failing[command] = left - 1
        return not left

    # --- the kubelet --------------------------------------------------------------------

    def _effective(self, config: bytes) -> tuple[dict[str, Any], dict[str, bool]]:
        """The running configz and gates for this config file (ignored paths at default)."""
        data = yaml.safe_load(config) or {}
        gates = dict(GATES)
        for name, on in (data.get("featureGates") or {}).items():
            if f"featureGates.{name}" not in self.ignores:
                gates[name] = bool(on)
        running = DEFAULTS | {k: v for k, v in data.items() if k not in self.ignores}
        for path in self.ignores:
            if not path.startswith("featureGates.") and path in DEFAULTS:
                running[path] = DEFAULTS[path]
        return running, gates

    def _start(self) -> Result:
        """What a restart does: run the binary, read the config, report with a new heartbeat."""
        self.running = False
        proc = subprocess.run(["sh", str(self.binary_path)], capture_output=True, timeout=10)
        if proc.returncode != 0:
            self.log.append(proc.stderr.decode().strip())
            return Result("restart", 0, "", "")  # the service manager started it; it died
        config, gates = self._effective(self.config_path.read_bytes())
        unknown = sorted(set(gates) - set(GATES))
        if unknown:
            self.log.append(f"E unrecognized feature gate: {unknown[0]}")
            return Result("restart", 0, "", "")
        self.running, self.running_config, self.running_gates = True, config, gates
        # a heartbeat newer than the restart (on this machine's clock, the node's here)
        self.heartbeat = max(math.floor(time.time()) + 1.0, self.heartbeat + 1.0)
        self.log.append("I kubelet started")
        return Result("restart", 0, "", "")

    def answer(self, argv: list[str]) -> Result | None:
        """The commands the fake answers itself (None: run it for real on this machine)."""
        line = shlex.join(argv)
        for matches, stderr in self.failing_when:
            if matches(argv):
                return Result(line, 1, "", stderr)
        if argv[:2] == ["sh", "-c"] and argv[2].startswith("fake-kubelet "):
            what = argv[2].split()[1]
            if not self._record(what):
                return Result(line, 1, "", f"fake-kubelet {what}: scripted failure")
            if what == "restart":
                return self._start()
            if what == "status":
                return Result(line, 0 if self.running else 3, "", "")
            if what == "pid":
                return Result(line, 0, f"{PID}\n" if self.running else "", "")
            if what == "log":
                return Result(line, 0, "\n".join(self.log) + "\n", "")
            raise AssertionError(f"unknown fake-kubelet command {argv[2]!r}")
        if argv[:2] == ["sh", "-c"] and "command -v curl" in argv[2]:
            ok = self._record("healthz") and self.running
            return Result(line, 0 if ok else 7, "ok" if ok else "", "" if ok else "refused")
        if argv[:3] == ["sh", "-c", 'base64 -w0 "/proc/$1/cmdline"']:
            self._record("cmdline")
            cmd = [str(self.binary_path), f"--config={self.config_path}", *self.flags]
            raw = "".join(a + "\0" for a in cmd).encode()
            return Result(line, 0, base64.b64encode(raw).decode(), "")
        return None

    # --- what the controller is given ----------------------------------------------------

    def profile(self, timeout_s: float = 1.5) -> NodeProfile:
        """The lab profile pointed at this host; a short health deadline (failures wait it)."""
        lab = load_profile("lab")
        return dataclasses.replace(
            lab,
            name="fake",
            node_name=self.name,
            ssh=SSHTarget(NODE, None, None, None, False, None, None),
            sudo=False,
            kubelet_config_path=str(self.config_path),
            kubelet_binary_path=str(self.binary_path),
            restart_command="fake-kubelet restart",
            status_command="fake-kubelet status",
            log_command="fake-kubelet log {lines}",
            pid_command="fake-kubelet pid",
            lock_path=str(self.lock_path),
            health_timeout_s=timeout_s,
        )

    def session(self, profile: NodeProfile) -> NodeSession:
        """A real NodeSession (its commands, its log tail) over this host's connection."""
        return NodeSession(profile, connection=FakeConnection(self))

    def controller(self, store: Store, **kw: Any) -> NodeController:
        profile = kw.pop("profile", None) or self.profile()
        return NodeController(
            profile,
            store,
            session=self.session(profile),
            cluster=FakeCluster(self),  # type: ignore[arg-type]
            **kw,
        )


@dataclasses.dataclass(frozen=True)
class FakeEndpoint:
    alias: str = NODE

    def describe(self) -> str:
        return self.alias


class FakeConnection(Commands):
    """A :class:`~abtest.node.connection.Connection` to the fake host: the fake's own
    answers, else the command runs here for real (no sudo: the test owns the files)."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.endpoint = FakeEndpoint()

    @property
    def connected(self) -> bool:
        return True

    def execute(
        self, argv: list[str], shown: str, *, sudo: bool, timeout: float, stdin: bytes | None
    ) -> Result:
        scripted = self.host.answer(argv)
        if scripted is not None:
            return scripted
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
        out = proc.stdout.decode("utf-8", "replace")
        return Result(shlex.join(argv), proc.returncode, out, proc.stderr.decode(), proc.stdout)

    def read_bytes(self, path: str, *, sudo: bool = False) -> bytes:
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            raise NodeError(f"{NODE}:{path}: no such file") from None

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        Path(path).write_bytes(data)
        os.chmod(path, mode)

    def stat(self, path: str) -> FileStat | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return FileStat(st.st_size, st.st_mode & 0o7777, st.st_uid, st.st_gid)

    def reconnect(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakeCluster:
    """The API server's view of the fake host: the Node object and the kubelet proxy."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.core = self
        self.source = None

    def read_node(self, name: str, **_: Any) -> Any:
        self.host.calls.append("read-node")
        # a kubelet that died still shows Ready with its last heartbeat for a while
        when = datetime.fromtimestamp(self.host.heartbeat, UTC)
        cond = SimpleNamespace(
            type="Ready",
            status="True",
            reason="KubeletReady",
            message="",
            last_heartbeat_time=when,
            last_transition_time=when,
        )
        info = SimpleNamespace(kubelet_version="v1.fake")
        return SimpleNamespace(status=SimpleNamespace(conditions=[cond], node_info=info))

    def connect_get_node_proxy_with_path(self, name: str, path: str, **_: Any) -> Any:
        self.host.calls.append(path)
        if not self.host.running:
            raise ApiException(status=503, reason="Service Unavailable")
        if path == "configz":
            body = json.dumps({"kubeletconfig": self.host.running_config})
        elif path == "metrics":
            body = "".join(
                f'kubernetes_feature_enabled{{name="{g}",stage="BETA"}} {int(on)}\n'
                for g, on in self.host.running_gates.items()
            )
        else:
            raise AssertionError(f"unexpected kubelet path {path}")
        return SimpleNamespace(data=body.encode())


class HostKit(FakeKit):
    """A :class:`~abtest.testing.node.FakeKit` whose controller is the real NodeController, on
    a fake host of the same node name (the batch rounds stay the fake node's)."""

    def __init__(self, host: FakeHost, node: FakeNode) -> None:
        super().__init__(node)
        self.host = host

    def controller(self, profile: NodeProfile, store: Store, **kw: Any) -> NodeController:
        assert profile.node_name == self.host.name
        return self.host.controller(
            store, progress=kw["progress"], break_lock=kw["break_lock"], run_id=kw.get("run_id")
        )
