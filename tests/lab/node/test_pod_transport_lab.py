"""``transport: pod`` on the real lab (issue 47): the lab node reached through a privileged pod
with a profile that has no SSH section at all (the lab's sshd is not used for it; the
``lab_node`` fixture checks the node over SSH, independently, before and after).

- a sweep on the pod profile finishes with the node restored (config and binary as before),
  the run's Method naming the transport and no node-access pod left;
- a change the kubelet cannot start with, its controller SIGKILLed right after the restart:
  the host-side dead-man timer alone puts the original config back and starts the kubelet,
  then ``abtest node restore`` over the pod closes the change and frees the lock.

Run under the lab lock:
``flock /work/lab.lock .venv/bin/python -m pytest tests/lab/node/test_pod_transport_lab.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_run import run_process
from lab_playbooks import quick_copy

from abtest.cluster.client import connect, node_proxy_get
from abtest.cluster.namespaces import delete_namespace
from abtest.cluster.node_pods import node_access_pods
from abtest.cluster.nodes import node_status
from abtest.config.playbook import NodeProfile, load_profile
from abtest.store.journal import RESTORED, Journal

if TYPE_CHECKING:
    from node_fixtures import LabNode

pytestmark = pytest.mark.lab
pytest_plugins = ["node_fixtures"]  # the lab_node fixture

REPO = Path(__file__).resolve().parents[3]
DEADMAN_S = 35  # the timer's interval: short, and longer than the profile's health timeout
BINARY = "/var/lib/abtest-lab/bin/kubelet"


def pod_profile_text() -> str:
    """playbooks/nodes/lab.yaml with ``transport: pod`` and no ``ssh:`` section."""
    text = (REPO / "playbooks" / "nodes" / "lab.yaml").read_text()
    text, n = re.subn(r"(?m)^ssh:\n(?:  .*\n)+", "", text)
    assert n == 1, "playbooks/nodes/lab.yaml changed shape: no single ssh section"
    text = text.replace("profile: lab\n", "profile: lab-pod\n")
    text = re.sub(r"(?m)^health_timeout_s: .*$", "health_timeout_s: 25", text)
    return text + (
        "transport: pod\npod:\n  image: docker.io/library/busybox:1.36.1\n"
        f"  pull_policy: Never\n  deadman_s: {DEADMAN_S}\n"
    )


@pytest.fixture()
def pod_profile(lab_node: LabNode, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "lab-pod.yaml"
    path.write_text(pod_profile_text())
    profile = load_profile(str(path))
    assert profile.ssh is None and profile.pod is not None
    binary_before = _sha(BINARY)
    yield path
    assert _sha(BINARY) == binary_before, "the kubelet binary is not the one it was"
    assert _node_access_pods(profile) == [], "a node-access pod was left behind"


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _node_access_pods(profile: NodeProfile) -> list[str]:
    assert profile.pod is not None
    cluster = connect(profile.kubeconfig)
    return [
        p["metadata"]["name"]
        for p in node_access_pods(cluster, profile.pod.namespace, profile.node_name)
    ]


def test_a_sweep_through_a_pod_gives_the_node_back(
    lab_node: LabNode, pod_profile: Path, tmp_path: Path
) -> None:
    namespace = f"abtest-pt-{secrets.token_hex(3)}"
    db = lab_node.store.path
    t0 = time.monotonic()
    try:
        proc = run_process(
            db, "gates", "ContainerCheckpoint", "--playbook", quick_copy(tmp_path),
            "--profile", str(pod_profile), "--rounds", "1", "--sizes", "5",
            "--namespace", namespace, "--db", str(db), "--json", timeout=600,
        )  # fmt: skip
    finally:
        delete_namespace(connect(lab_node.profile.kubeconfig), namespace, wait_s=None)
    print(f"\nPOD SWEEP {time.monotonic() - t0:.1f} s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "finished", out
    assert out["nodes"][0]["failed_arms"] == {}, out["nodes"][0]["failed_arms"]
    run = lab_node.store.run_row(out["run_id"])
    env = json.loads(run["env_json"])
    assert env["transport"].startswith("a pod (docker.io/library/busybox:1.36.1")
    visits = lab_node.store.query("SELECT arm FROM visits WHERE run_id = ?", (out["run_id"],))
    assert {v["arm"] for v in visits} == {"baseline", "+ContainerCheckpoint"}
    report = run_process(db, "report", out["run_id"], "--db", str(db), "--format", "md",
                     "--out", str(tmp_path / "r"), timeout=300)  # fmt: skip
    assert report.returncode == 0, report.stderr[-2000:]
    text = "".join(p.read_text() for p in (tmp_path / "r").glob("*.md"))
    assert "Node access: abtest-lab through a pod (docker.io/library/busybox:1.36.1" in text
    # the lab_node and pod_profile fixtures: config byte-identical, lock free, no backup,
    # healthy (checked over SSH), the binary unchanged, no node-access pod left


CHILD = """
import sys
from abtest.config.playbook import load_profile
from abtest.node.control import NodeController
from abtest.store.db import Store

profile = load_profile(sys.argv[1])
with NodeController(profile, Store(sys.argv[2]), progress=lambda m: print(m, flush=True)) as c:
    c.apply({"featureGates.NoSuchGateAtAll": True}, check_known=False)
"""


def test_the_host_side_timer_alone_undoes_a_kubelet_that_cannot_start(
    lab_node: LabNode, pod_profile: Path
) -> None:
    profile = load_profile(str(pod_profile))
    cluster = connect(profile.kubeconfig)
    # no other timer is armed (the lab is this machine: its processes are ours to see)
    assert _timers() == [], _timers()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(pod_profile), str(lab_node.store.path)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen = []
    assert child.stdout is not None
    for line in child.stdout:
        seen.append(line)
        if "restarting the kubelet detached" in line:
            break
    assert "dead-man timer armed" in "".join(seen), "".join(seen)
    time.sleep(1.0)  # the kubelet is restarting with a gate it refuses
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    killed = time.monotonic()
    assert lab_node.config_bytes() != lab_node.original  # the change is on the node
    assert Journal(lab_node.store).pending(profile.node_name) is not None
    # nothing of abtest runs now: only the timer on the host can bring the node back
    back = None
    while time.monotonic() - killed < DEADMAN_S + 60:
        if lab_node.config_bytes() == lab_node.original and _kubelet_up(cluster, profile):
            back = time.monotonic() - killed
            break
        time.sleep(1.0)
    assert back is not None, "the dead-man timer did not bring the kubelet back"
    print(f"\nTIMER BACK {back:.1f} s after the kill (interval {DEADMAN_S} s)")
    assert DEADMAN_S - 5 < back < DEADMAN_S + 45  # the killed controller's own timer
    assert _timers() == []
    # then `abtest node restore` over the pod closes the change and frees the killed lock
    db = lab_node.store.path
    restore = run_process(db, "node", "restore", "--profile", str(pod_profile), "--db", str(db),
                      timeout=300)  # fmt: skip
    assert restore.returncode == 0, restore.stderr[-3000:] + restore.stdout[-2000:]
    [entry] = Journal(lab_node.store).history(profile.node_name)
    assert entry.state == RESTORED
    # the lab_node fixture: config byte-identical, lock free, no backup, healthy


def _kubelet_up(cluster: object, profile: NodeProfile) -> bool:
    try:
        ok = node_proxy_get(cluster, profile.node_name, "healthz") == "ok"  # type: ignore[arg-type]
        return ok and bool(node_status(cluster, profile.node_name).ready)  # type: ignore[arg-type]
    except Exception:
        return False


def _timers() -> list[str]:
    """The pids of the dead-man timers running on the lab node (this machine)."""
    found = subprocess.run(["pgrep", "-f", "abtest-deadman"], capture_output=True, text=True)
    return found.stdout.split()


def test_a_kubelet_that_cannot_start_is_rolled_back_after_the_timer(
    lab_node: LabNode, pod_profile: Path
) -> None:
    """The controller alive: the restart is never verified, so the timer is never disarmed;
    abtest waits for it to bring the node back through the pod, then rolls back as over SSH."""
    from abtest.node.control import NodeController
    from abtest.node.records import RolledBack

    profile = load_profile(str(pod_profile))
    said: list[str] = []
    t0 = time.monotonic()
    with (
        NodeController(profile, lab_node.store, progress=said.append) as ctl,
        pytest.raises(RolledBack) as caught,
    ):
        ctl.apply({"featureGates.NoSuchGateAtAll": True}, check_known=False)
    took = time.monotonic() - t0
    print(f"\nROLLED BACK {took:.1f} s")
    assert caught.value.rollback.restored and caught.value.rollback.health is not None
    assert any("puts the originals back by itself" in m for m in said), said
    assert lab_node.config_bytes() == lab_node.original
    [entry] = Journal(lab_node.store).history(profile.node_name)
    assert entry.state == RESTORED and "rolled back" in (entry.detail or "")
    assert _timers() == []
