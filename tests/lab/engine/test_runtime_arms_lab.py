"""Runtime arms on the real lab (issue 13 part 1): runc and crun as a pod-spec factor crossed
with a kubelet factor, through the real CLI in a child process.

What each pod's sandbox really ran under is read here from the node's own containerd
(``crictl pods -o json``, polled while the sweep runs), independently of the tool's own
check; pod names tie each sandbox to its round and arm in the results database. Run under
the lab lock: ``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -m lab
tests/lab/engine/test_runtime_arms_lab.py`` (about 2 minutes).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from abtest.config.plan_options import PlanOptions
from abtest.config.playbook import NodeProfile
from abtest.engine.sweep_plan import build_plan, restart_count

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[3]
CRICTL = [
    "/var/lib/abtest-lab/bin/crictl",
    "--runtime-endpoint",
    "unix:///run/abtest-lab/containerd/containerd.sock",
]
NAMESPACE = "abtest-runtimes"
CATALOG = """catalog: runtimes
factors:
  - name: crun
    kind: runtime_class
    on: crun
    off: runc
    summary: the pods run under crun instead of runc
  - name: kubeAPIQPS
    kind: kubelet_settings
    on: {kubeAPIQPS: 3, kubeAPIBurst: 10}
    off: {kubeAPIQPS: 50, kubeAPIBurst: 100}
    summary: throttled kubelet API client
  - name: nosuch
    kind: runtime_class
    on: nosuch
    off: runc
    summary: a RuntimeClass the cluster does not have
"""
PLAYBOOK = """playbook: runtimes
catalog: {catalog}
sizes: [3]
rounds: 1
warmup: false
namespace: abtest-runtimes
profile: lab
generator: {observe_s: 2}
"""


class SandboxWatch:
    """Polls the lab node's containerd for the sandboxes of ``NAMESPACE`` while a sweep runs:
    pod name -> every runtime handler seen for it."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            proc = subprocess.run(
                [*CRICTL, "pods", "-o", "json", "--label",
                 f"io.kubernetes.pod.namespace={NAMESPACE}"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            if proc.returncode != 0:
                self.errors.append(proc.stderr[-300:])
            else:
                for item in json.loads(proc.stdout).get("items") or []:
                    name = item["metadata"]["name"]
                    self.seen.setdefault(name, set()).add(item.get("runtimeHandler") or "")
            self.stop.wait(0.3)

    def __enter__(self) -> SandboxWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def _abtest(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args, "--db", str(db)],
        env={**os.environ, "NO_COLOR": "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture()
def files(tmp_path: Path, lab_profile: NodeProfile) -> Iterator[Path]:
    catalog = tmp_path / "runtimes.yaml"
    catalog.write_text(CATALOG)
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(PLAYBOOK.replace("{catalog}", str(catalog)))
    before = Path(lab_profile.kubelet_config_path).read_bytes()
    yield playbook
    assert Path(lab_profile.kubelet_config_path).read_bytes() == before, "kubelet config changed"
    assert not Path(lab_profile.lock_path).exists(), "node lock left behind"


def _pods_by_arm(db: Path) -> dict[str, set[str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT r.arm, p.name FROM pods p JOIN rounds r ON r.id = p.round_id"
        ).fetchall()
    out: dict[str, set[str]] = {}
    for arm, name in rows:
        out.setdefault(arm, set()).add(name)
    return out


def test_runc_and_crun_arms_crossed_with_a_kubelet_factor_run_under_their_handlers(
    files: Path, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    # a seed whose order puts runc and crun arms of one kubelet config next to each other
    seed = next(
        s
        for s in range(1, 50)
        if restart_count(
            build_plan(
                PlanOptions(
                    playbook=str(files), factors=("crun", "kubeAPIQPS"), design="factorial", seed=s
                )
            )
        )
        < 4
    )
    with SandboxWatch() as watch:
        proc = _abtest(db, "gates", "crun", "kubeAPIQPS", "--playbook", str(files),
                       "--design", "factorial", "--seed", str(seed))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not watch.errors, watch.errors
    by_arm = _pods_by_arm(db)
    assert set(by_arm) == {"baseline", "+crun", "+kubeAPIQPS", "combined"}
    want = {"baseline": "runc", "+crun": "crun", "+kubeAPIQPS": "runc", "combined": "crun"}
    for arm, names in by_arm.items():
        assert len(names) == 3
        for name in names:
            # seen on the node itself, not taken from the tool
            assert watch.seen.get(name) == {want[arm]}, (arm, name, watch.seen.get(name))
    with sqlite3.connect(db) as conn:
        rounds = conn.execute("SELECT arm, accepted, reason FROM rounds").fetchall()
        visits = conn.execute(
            "SELECT arm, restart_to_verified_s FROM visits ORDER BY id"
        ).fetchall()
        settings = dict(conn.execute("SELECT name, settings_json FROM arms").fetchall())
    assert all(accepted for _, accepted, _ in rounds), rounds
    assert json.loads(settings["+crun"])["pod.runtimeClassName"] == "crun"
    # arms that differ only in their runtime share the kubelet: no restart between them
    restarted = [t is not None for _, t in visits]
    kubelet = {"baseline": 0, "+crun": 0, "+kubeAPIQPS": 1, "combined": 1}
    expected = [True] + [kubelet[a] != kubelet[b] for (b, _), (a, _) in pairwise(visits)]
    assert restarted == expected, visits
    assert not all(restarted)  # the seed was chosen so that one restart is skipped


def test_a_runtime_class_the_cluster_lacks_fails_its_arm_before_any_pod(
    files: Path, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    with SandboxWatch() as watch:
        proc = _abtest(db, "gates", "nosuch", "--playbook", str(files), "--design",
                       "baseline+singles")  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "no RuntimeClass 'nosuch'" in out, out[-3000:]
    with sqlite3.connect(db) as conn:
        arms = dict(conn.execute("SELECT name, status FROM arms").fetchall())
        failure = conn.execute("SELECT failure FROM arms WHERE name = '+nosuch'").fetchone()[0]
        rounds = conn.execute("SELECT arm FROM rounds").fetchall()
    assert arms["+nosuch"] == "failed" and "no batch of this arm ran" in failure
    assert rounds == [("baseline",)]  # the baseline ran; the failed arm created no pod
    assert set(watch.seen) == _pods_by_arm(db)["baseline"]


def _batch_playbook(tmp_path: Path, runtime_class: str) -> Path:
    path = tmp_path / f"batch-{runtime_class}.yaml"
    path.write_text(
        "playbook: batch-runtime\ncatalog: lab\nsizes: [3]\nrounds: 1\nwarmup: false\n"
        f"namespace: {NAMESPACE}\nprofile: lab\ngenerator: {{observe_s: 1}}\n"
        f"workload: {{runtime_class: {runtime_class}}}\n"
    )
    return path


def test_a_single_batch_under_a_runtime_class_is_checked_like_a_runtime_arm(
    files: Path, tmp_path: Path
) -> None:
    # `abtest batch` with a workload RuntimeClass: the same checks as a sweep's runtime arm
    db = tmp_path / "b.sqlite"
    with SandboxWatch() as watch:
        proc = _abtest(db, "batch", "--profile", "lab", "--pods", "3", "--playbook",
                       str(_batch_playbook(tmp_path, "crun")))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        accepted, reason = conn.execute("SELECT accepted, reason FROM rounds").fetchone()
        names = {r[0] for r in conn.execute("SELECT name FROM pods")}
    assert accepted == 1, reason
    assert len(names) == 3 and all(watch.seen.get(n) == {"crun"} for n in names), watch.seen

    db2 = tmp_path / "b2.sqlite"
    with SandboxWatch() as watch:
        proc = _abtest(db2, "batch", "--profile", "lab", "--pods", "3", "--playbook",
                       str(_batch_playbook(tmp_path, "nosuch")))  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert "no RuntimeClass 'nosuch'" in out and "no batch of this arm ran" in out, out[-3000:]
    assert not watch.seen  # refused before any pod
    with sqlite3.connect(db2) as conn:
        assert conn.execute("SELECT count(*) FROM rounds").fetchone()[0] == 0
        status = conn.execute("SELECT status FROM runs").fetchone()[0]
    assert status == "failed"
