"""A killed controller never costs the node its own kubelet (issue 44), on the real lab with
the installed CLI: the bisection whose good end is byte-identical to the node's kubelet,
SIGKILLed once the bad end runs, restored through another database, then resumed; and a
sweep with a kubelet_build arm SIGKILLed at each step of its binary swap. Each ends with the
node's kubelet byte-identical, no backup or marker left, the node unlocked and Ready on it.

The builds are the shipped bisect-demo series' prefixes (scripts/prefetch-builds builds them
in the background while earlier lab tests run)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from abtest.batch.template import MANAGED_BY, MANAGED_BY_KEY
from abtest.config.playbook import NodeProfile

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[3]
GOOD, MIDDLE, BAD = "v1.36.3", "v1.36.3+bisect-demo.p2", "v1.36.3+bisect-demo"
NAMESPACE = "abtest"  # the playbook's and the lab profile's
WAIT_S = 600.0  # a bound, not a pace: every wait below ends on a condition
PLAYBOOK = """\
playbook: bisect-kill
description: the smallest bisection that still measures (5 pods, one look at 3 blocks)
catalog: lab
design: baseline
sizes: [5]
rounds: 3
max_rounds: 3
margin_pct: 5
confidence: 0.95
metrics: [batch_ready_s]
seed: 20261203
warmup: false
namespace: abtest
generator:
  qps: 1000
  concurrency: 150
  timeout_s: 300
  observe_s: 2
"""
CATALOG = f"""\
catalog: kill-swap
factors:
  - name: bd2
    kind: kubelet_build
    off: node
    on: {MIDDLE}
    summary: the first two bisect-demo patches
"""


def _abtest(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "abtest", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _core(profile: NodeProfile) -> client.CoreV1Api:
    new_client: Callable[..., client.ApiClient] = config.new_client_from_config
    return client.CoreV1Api(new_client(config_file=profile.kubeconfig))


def _kubelet_version(core: client.CoreV1Api, node: str) -> str | None:
    with contextlib.suppress(client.ApiException):
        got: Any = core.read_node(node)
        return str(got.status.node_info.kubelet_version)
    return None


def _until(what: str, ok: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ok():
        assert proc.poll() is None, f"the controller ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)


def _kill(proc: subprocess.Popen[bytes], core: client.CoreV1Api) -> None:
    """SIGKILL, then what a user would do next: delete the round's pods the killed controller
    left (only the tool's own, by its label), so the next command's pre-flight finds the
    namespace empty."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    ours = f"{MANAGED_BY_KEY}={MANAGED_BY}"
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector=ours, grace_period_seconds=0)
    deadline = time.monotonic() + WAIT_S
    while core.list_namespaced_pod(NAMESPACE, label_selector=ours).items:
        assert time.monotonic() < deadline, "the killed run's pods never went"
        time.sleep(0.2)


def _assert_node_own_kubelet(profile: NodeProfile, original: str) -> None:
    binary = profile.kubelet_binary_path
    assert _sha(binary) == original, "the node's own kubelet, byte for byte"
    assert not Path(binary + ".abtest-original").exists()
    assert not Path(binary + ".abtest-original.marker").exists()
    assert not Path(profile.lock_path).exists(), "the node is unlocked"
    node: Any = _core(profile).read_node(profile.node_name)
    assert node.status.node_info.kubelet_version == GOOD
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True"


@pytest.fixture(scope="module")
def builds() -> None:
    """Both prefixes placed on the lab (cached: scripts/prefetch-builds built them)."""
    proc = _abtest("lab", "kubelets", MIDDLE, BAD, timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_killed_bisection_restored_elsewhere_then_resumed_keeps_the_node_kubelet(
    lab_profile: NodeProfile, builds: None, tmp_path: Path
) -> None:
    """Issue 44's four steps, as a user would run them."""
    original = _sha(lab_profile.kubelet_binary_path)
    playbook = tmp_path / "bisect-kill.yaml"
    playbook.write_text(PLAYBOOK)
    x = tmp_path / "x.sqlite"
    core = _core(lab_profile)
    argv = ["--profile", "lab", "--db", str(x)]
    proc = _start(
        "bisect", "--builds", f"{GOOD},{MIDDLE},{BAD}", "--playbook", str(playbook), *argv
    )
    try:  # 1-2: killed once a build other than the node's own runs
        _until(
            "the bad end running", lambda: _sha(lab_profile.kubelet_binary_path) != original, proc
        )
        _until(
            "the swapped kubelet posting its version",
            lambda: (_kubelet_version(core, lab_profile.node_name) or GOOD) != GOOD,
            proc,
        )
    finally:
        _kill(proc, core)
    # 3: the command the node's lock names, without --db: the journal is in x, not here
    restore = _abtest("node", "restore", "--profile", "lab")
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert _sha(lab_profile.kubelet_binary_path) == original
    # 4: the bisection goes on through x, whose journal still holds its swap
    with sqlite3.connect(x) as db:
        (first,) = db.execute("SELECT id FROM runs ORDER BY created_at LIMIT 1").fetchone()
    resumed = _abtest("bisect", "--resume", str(first), *argv)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode in (0, 1, 3), out  # a verdict, whichever: not 2 or 4
    assert "Traceback" not in out and "restore the binary by hand" not in out
    _assert_node_own_kubelet(lab_profile, original)


# the step of a swap the controller is killed after, and how the test sees it happen
STEPS = ["backup written", "candidate copied", "kubelet restarted", "verified"]


@pytest.mark.parametrize("step", STEPS)
def test_kill_at_each_step_of_a_swap_then_restore(
    lab_profile: NodeProfile, builds: None, tmp_path: Path, step: str
) -> None:
    original = _sha(lab_profile.kubelet_binary_path)
    binary = lab_profile.kubelet_binary_path
    core = _core(lab_profile)
    catalog = tmp_path / "kill-swap.yaml"
    catalog.write_text(CATALOG)
    db = tmp_path / "r.sqlite"
    restarted_at: list[datetime] = []

    def restarted() -> bool:
        if (_kubelet_version(core, lab_profile.node_name) or GOOD) == GOOD:
            return False
        restarted_at.append(datetime.now(UTC))
        return True

    def verified() -> bool:  # the swapped kubelet proven in effect: its round's pods made
        pods = core.list_namespaced_pod(NAMESPACE).items
        return any(p.metadata.creation_timestamp > restarted_at[0] for p in pods)

    seen: dict[str, Callable[[], bool]] = {
        "backup written": lambda: Path(binary + ".abtest-original").exists(),
        "candidate copied": lambda: _sha(binary) != original,
        "kubelet restarted": restarted,
        "verified": verified,
    }
    proc = _start(
        "gates", "--catalog", str(catalog), "bd2", "--design", "baseline+singles",
        "--rounds", "1", "--sizes", "3", "--profile", "lab", "--db", str(db),
    )  # fmt: skip
    try:
        for upto in STEPS[: STEPS.index(step) + 1]:
            _until(upto, seen[upto], proc)
    finally:
        _kill(proc, core)
    restore = _abtest("node", "restore", "--profile", "lab", "--db", str(db))
    assert restore.returncode == 0, restore.stdout + restore.stderr
    _assert_node_own_kubelet(lab_profile, original)
