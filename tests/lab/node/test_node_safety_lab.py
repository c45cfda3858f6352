"""Node config and binary safety on the real lab (issue 11 items 3 and 4).

- An edit made to the kubelet config during a sweep is refused by the sweep's end-of-run
  restore: the run says which node and why, and the node is left exactly as the editor
  left it (bytes, and no kubelet restart). ``abtest node restore --force`` then puts the
  original back.
- A candidate kubelet binary is restored by ``abtest node restore`` from a fresh, empty
  results database (the original's bytes, owner and mode), from the node-side marker.
- A candidate the kubelet will not start with is rolled back with the config.

Run under the lab lock: ``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -m lab
tests/lab/node/test_node_safety_lab.py``. The ``lab_node`` fixture checks the node afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from abtest.cluster.client import connect
from abtest.cluster.namespaces import delete_namespace
from abtest.node.control import BACKUP_SUFFIX, MARKER_SUFFIX, NodeController
from abtest.node.records import RolledBack
from abtest.store.db import Store
from abtest.store.journal import CHANGED, RESTORED, Journal

if TYPE_CHECKING:
    from node_fixtures import LabNode

pytestmark = pytest.mark.lab
pytest_plugins = ["node_fixtures"]  # the lab_node fixture

REPO = Path(__file__).resolve().parents[3]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _owner_mode(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_mode, st.st_uid, st.st_gid


def _abtest(db: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args, "--db", str(db)],
        env={**os.environ, "ABTEST_DB": str(db), "NO_COLOR": "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _kubelet_pids(binary: str) -> set[int]:
    """The processes running the lab's kubelet binary (by /proc/PID/exe)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                exe = os.readlink(proc / "exe")
            except OSError:
                continue
            if exe == binary or exe.startswith(binary + " ("):
                pids.add(int(proc.name))
    return pids


def _visits(db: Path, run_id: str) -> list[dict[str, Any]]:
    with Store(db) as store:
        rows = store.query("SELECT * FROM visits WHERE run_id = ? ORDER BY id", (run_id,))
        return [dict(r) for r in rows]


@pytest.fixture()
def namespace(lab_node: LabNode) -> Iterator[str]:
    name = f"abtest-ed-{secrets.token_hex(4)}"
    yield name
    # not reused: no need to wait the ~5 s the namespace controller takes to finish it
    delete_namespace(connect(lab_node.profile.kubeconfig), name, wait_s=None)


def test_an_edit_during_a_sweep_is_refused_on_restore_and_left_as_the_editor_left_it(
    lab_node: LabNode, namespace: str, tmp_path: Path
) -> None:
    prof = lab_node.profile
    config = Path(prof.kubelet_config_path)
    flags = ["ContainerCheckpoint", "--playbook", "lab-sweep", "--rounds", "1", "--sizes", "5"]
    flags += ["--namespace", namespace]
    plan = _abtest(tmp_path / "plan-only.sqlite", "plan", "--json", *flags)
    assert plan.returncode == 0, plan.stderr
    n_visits = len(json.loads(plan.stdout)["schedule"]["visits"])
    db = lab_node.store.path
    run_id_file = tmp_path / "run-id"
    log = tmp_path / "sweep.log"
    with log.open("w") as out:
        argv = ["gates", *flags, "--db", str(db), "--run-id-file", str(run_id_file)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "abtest", *argv],
            env={**os.environ, "ABTEST_DB": str(db), "NO_COLOR": "1"},
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        # the last visit's kubelet is verified: an operator edits the config by hand now
        deadline = time.monotonic() + 600
        run_id = ""
        while True:
            assert proc.poll() is None, f"the sweep ended early:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"too slow:\n{log.read_text()[-4000:]}"
            if not run_id and run_id_file.exists():
                run_id = run_id_file.read_text().strip()
            visits = _visits(db, run_id) if run_id else []
            if len(visits) == n_visits and visits[-1]["applied"]:
                break
            time.sleep(0.2)
        edited = config.read_bytes() + b"# edited by hand during the sweep\n"
        config.write_bytes(edited)
        kubelets = _kubelet_pids(prof.kubelet_binary_path)
        assert len(kubelets) == 1
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert rc == 2, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    error = [ln for ln in text.splitlines() if ln.startswith("abtest: error:")]
    assert error and "changed under us" in error[-1] and prof.node_name in error[-1], text
    assert "--force" in error[-1]
    # left exactly as the editor left it: the bytes, and the same kubelet process
    assert config.read_bytes() == edited
    assert _kubelet_pids(prof.kubelet_binary_path) == kubelets
    run = lab_node.store.run_row(run_id)
    assert run["status"] == "failed", dict(run)
    assert "changed under us" in run["stop_reason"] and prof.node_name in run["stop_reason"]
    pending = Journal(lab_node.store).pending(prof.node_name)
    assert pending is not None and pending.state == CHANGED
    assert lab_node.lock_present()  # kept: a change of ours may still be in effect

    # a plain restore refuses again and changes nothing
    again = _abtest(db, "node", "restore", "--profile", "lab")
    assert again.returncode == 2 and "changed under us" in again.stderr, again.stderr
    assert config.read_bytes() == edited
    assert _kubelet_pids(prof.kubelet_binary_path) == kubelets

    # the operator who knows: --force puts the original back, restarts, verifies
    forced = _abtest(db, "node", "restore", "--profile", "lab", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["restored"] is True
    assert config.read_bytes() == lab_node.original
    assert not Path(prof.kubelet_config_path + BACKUP_SUFFIX + MARKER_SUFFIX).exists()
    assert Journal(lab_node.store).pending(prof.node_name) is None


@pytest.fixture()
def candidate(lab_node: LabNode) -> Iterator[Path]:
    """A candidate kubelet on the node: the lab's own, plus trailing bytes (an ELF runs the
    same; its sha256 differs, so the swap and the restore are both visible), mode 0700."""
    binary = Path(lab_node.profile.kubelet_binary_path)
    path = binary.with_name("kubelet-abtest-safety-candidate")
    path.write_bytes(binary.read_bytes() + b"\n# abtest candidate\n")
    path.chmod(0o700)
    yield path
    path.unlink(missing_ok=True)


_SWAP = """
import sys
from abtest.node.control import NodeController
from abtest.config.playbook import load_profile
from abtest.store.db import Store
with Store(sys.argv[1]) as store, NodeController(load_profile("lab"), store) as ctl:
    ctl.install_kubelet_binary(sys.argv[2])
    rec = ctl.apply({}, force_restart=True)  # the kubelet now runs the candidate
    print("restarted" if rec.restarted and rec.health is not None else "not restarted")
"""


def test_a_candidate_binary_is_restored_without_the_database(
    lab_node: LabNode, candidate: Path, tmp_path: Path
) -> None:
    prof = lab_node.profile
    binary = Path(prof.kubelet_binary_path)
    original_sha, original_stat = _sha(binary), _owner_mode(binary)
    assert _owner_mode(candidate) != original_stat
    lost = tmp_path / "lost.sqlite"
    # the controller that swaps the binary is another process, gone when its database is lost
    swap = subprocess.run(
        [sys.executable, "-c", _SWAP, str(lost), str(candidate)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert swap.returncode == 0, swap.stderr
    assert swap.stdout.strip() == "restarted", swap.stdout
    assert _sha(binary) == _sha(candidate) != original_sha
    assert _owner_mode(binary) == original_stat  # the original's owner and mode
    marker = Path(str(binary) + BACKUP_SUFFIX + MARKER_SUFFIX)
    assert original_sha in marker.read_text()
    assert lab_node.lock_present(), "a change in effect keeps the node lock"
    lost.unlink()  # the controller's database is lost

    fresh = tmp_path / "fresh.sqlite"
    proc = _abtest(fresh, "node", "restore", "--profile", "lab", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["restored"] is True
    assert "original kubelet binary back" in proc.stderr
    assert _sha(binary) == original_sha
    assert _owner_mode(binary) == original_stat
    assert not Path(str(binary) + BACKUP_SUFFIX).exists() and not marker.exists()
    assert not lab_node.lock_present()
    with Store(fresh) as store:
        journal = Journal(store)
        assert journal.pending(prof.node_name) is None
        assert journal.pending(prof.node_name, kind="binary") is None
        assert {e.kind for e in journal.history(prof.node_name)} == {"config", "binary"}


def test_a_candidate_that_will_not_start_is_rolled_back_with_the_config(
    lab_node: LabNode, tmp_path: Path
) -> None:
    prof = lab_node.profile
    binary = Path(prof.kubelet_binary_path)
    original_sha, original_stat = _sha(binary), _owner_mode(binary)
    broken = binary.with_name("kubelet-abtest-broken")
    broken.write_bytes(
        b"#!/bin/sh\necho 'abtest: this kubelet build refuses to start' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    try:
        with NodeController(prof, lab_node.store) as ctl:
            ctl.install_kubelet_binary(str(broken))
            with pytest.raises(RolledBack) as caught:
                ctl.apply({}, force_restart=True)
            assert "config and kubelet binary" in str(caught.value)
            assert caught.value.rollback.restored
    finally:
        broken.unlink()
    assert _sha(binary) == original_sha and _owner_mode(binary) == original_stat
    assert not Path(str(binary) + BACKUP_SUFFIX).exists()
    journal = Journal(lab_node.store)
    assert journal.pending(prof.node_name, kind="binary") is None
    assert [e.state for e in journal.history(prof.node_name)] == [RESTORED, RESTORED]
