"""A results-database fault mid-sweep on the real lab (issue 35), through the real CLI in a child
process: a PostgreSQL server stopped with an immediate shutdown after two rounds, and the SQLite
file's filesystem (a small tmpfs) filling while a changed arm is in effect. After each: one line,
exit 4, no traceback; the node's config byte-identical, the kubelet back on it and healthy, the
lock free, no backup; the finished rounds readable; and once the store is back ``--resume``
finishes with no hand step. Run them under the lab lock:
``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest tests/lab/engine/test_store_fault_lab.py``.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from lab_playbooks import quick_copy

from abtest.cluster.client import connect
from abtest.cluster.namespaces import delete_namespace
from abtest.node.preflight import show
from abtest.store.db import Store
from abtest.store.journal import Journal

if TYPE_CHECKING:
    from node_fixtures import LabNode
    from pg_server import PgServer

pytestmark = pytest.mark.lab
pytest_plugins = ["node_fixtures"]  # the lab_node fixture

REPO = Path(__file__).resolve().parents[3]
# One factor in 3 blocks (6 visits, 6 rounds): a fault lands after the second round, mid-run,
# with a changed arm in effect, as it did in the 10 visits of `--all` in 2 blocks; 4 fewer
# kubelet restarts per sweep and resume. The lab playbook with a 2 s observation
# (tests/lab_playbooks.py).
FACTOR_FLAGS = ("ContainerCheckpoint", "--rounds", "3", "--sizes", "5")
PLANNED_ROUNDS = 6


def _flags(tmp_path: Path) -> tuple[str, ...]:
    return ("--playbook", quick_copy(tmp_path), *FACTOR_FLAGS)


@pytest.fixture()
def namespace(lab_node: LabNode) -> Iterator[str]:
    name = f"abtest-sf-{secrets.token_hex(4)}"
    yield name
    # not reused: no need to wait the ~5 s the namespace controller takes to finish it
    delete_namespace(connect(lab_node.profile.kubeconfig), name, wait_s=None)


def _gates(db: str, *args: str, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "abtest", "gates", *args, "--db", db],
            env={**os.environ, "NO_COLOR": "1"},
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _wait_for(proc: subprocess.Popen[str], log: Path, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 600
    while not ready():
        assert proc.poll() is None, f"the sweep ended early:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"too slow:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()


def _progress(db: str, run_id_file: Path) -> tuple[int, str | None]:
    """Rounds stored so far and the arm of the newest applied visit (None: none yet)."""
    if not run_id_file.exists() or not run_id_file.read_text().strip():
        return 0, None
    run_id = run_id_file.read_text().strip()
    with Store(db) as store:
        rounds = len(store.query("SELECT id FROM rounds WHERE run_id = ?", (run_id,)))
        visits = store.query(
            "SELECT arm FROM visits WHERE run_id = ? AND applied = 1 ORDER BY id DESC", (run_id,)
        )
    return rounds, (visits[0][0] if visits else None)


def _assert_one_line_exit_4(rc: int, text: str, words: str) -> None:
    assert rc == 4, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    assert words in text, text[-4000:]


def _assert_node_free(lab: LabNode) -> None:
    """Config byte-identical, kubelet running it and healthy, lock free, no backup."""
    assert lab.config_bytes() == lab.original, "the kubelet config is not byte-identical"
    state = show(lab.profile, store=lab.store)
    assert state["config_sha256"] == lab.original_sha256
    assert state["healthy"] is True, state["problems"]
    assert state["lock"] is None, state["lock_holder"]
    assert state["backup_on_node"] is False


def _resume_finishes(db: str, run_id: str, done: int, log: Path) -> None:
    proc = _gates(db, "--resume", run_id, log=log)
    try:
        rc = proc.wait(timeout=900)
    finally:
        _stop(proc)
    assert rc == 0, log.read_text()[-4000:]
    with Store(db) as store:
        run = store.run_row(run_id)
        assert run["status"] == "finished", dict(run)
        rounds = store.query("SELECT id FROM rounds WHERE run_id = ?", (run_id,))
        assert len(rounds) == PLANNED_ROUNDS and len(rounds) > done
        assert Journal(store).pending(run["node_name"]) is None


def test_postgres_stopped_after_two_rounds_leaves_the_node_free(
    lab_node: LabNode, namespace: str, tmp_path: Path, pg_server: PgServer, pg_url: str
) -> None:
    run_id_file = tmp_path / "run-id"
    log = tmp_path / "sweep.log"
    args = (*_flags(tmp_path), "--namespace", namespace, "--run-id-file", str(run_id_file))
    proc = _gates(pg_url, *args, log=log)
    try:
        _wait_for(proc, log, lambda: _progress(pg_url, run_id_file)[0] >= 2)
        pg_server.stop("immediate")
        try:
            rc = proc.wait(timeout=600)
        finally:
            pg_server.start()
    finally:
        _stop(proc)
    text = log.read_text()
    _assert_one_line_exit_4(rc, text, "results database")
    _assert_node_free(lab_node)
    run_id = run_id_file.read_text().strip()
    with Store(pg_url) as store:  # the finished rounds are readable
        done = len(store.query("SELECT id FROM rounds WHERE run_id = ?", (run_id,)))
    assert 2 <= done < PLANNED_ROUNDS
    _resume_finishes(pg_url, run_id, done, tmp_path / "resume.log")
    _assert_node_free(lab_node)


@pytest.fixture()
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs of this test's own, unmounted after."""
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(mount)],
                   check=True)  # fmt: skip
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    """Fill the filesystem ``folder`` is on; the file that did it."""
    filler = folder / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_a_full_filesystem_under_sqlite_leaves_the_node_free(
    lab_node: LabNode, namespace: str, tmp_path: Path, small_fs: Path
) -> None:
    db = str(small_fs / "results.sqlite")
    run_id_file = tmp_path / "run-id"
    log = tmp_path / "sweep.log"
    args = (*_flags(tmp_path), "--namespace", namespace, "--run-id-file", str(run_id_file))
    proc = _gates(db, *args, log=log)

    def changed_arm_in_effect() -> bool:
        rounds, arm = _progress(db, run_id_file)
        return rounds >= 2 and arm is not None and arm != "baseline"

    try:
        _wait_for(proc, log, changed_arm_in_effect)
        filler = _fill(small_fs)
        rc = proc.wait(timeout=600)
    finally:
        _stop(proc)
    text = log.read_text()
    _assert_one_line_exit_4(rc, text, "database or disk is full")
    _assert_node_free(lab_node)
    filler.unlink()  # the disk has room again
    run_id = run_id_file.read_text().strip()
    with Store(db) as store:
        done = len(store.query("SELECT id FROM rounds WHERE run_id = ?", (run_id,)))
    assert 2 <= done < PLANNED_ROUNDS
    _resume_finishes(db, run_id, done, tmp_path / "resume.log")
    _assert_node_free(lab_node)
