"""`lab down` stops a shim the lab's containerd forgot (it serves no process) and leaves one
that still has a child; real processes stand in for the shims (a copy of sh named like the
shim, in a lab bin folder of the test's own)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from abtest.lab import shims
from abtest.lab.layout import Paths


@pytest.fixture()
def paths(tmp_path: Path) -> Paths:
    p = Paths(root=tmp_path / "state", run=tmp_path / "run")
    p.bin.mkdir(parents=True)
    shutil.copy("/bin/sh", p.bin / shims.SHIM)
    (p.run / "containerd").mkdir(parents=True)
    return p


@pytest.fixture()
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def _shim(paths: Paths, script: str, address: Path) -> subprocess.Popen[bytes]:
    # sh -c SCRIPT $0 $1 $2: the shim's own flags ride along as sh's positional arguments
    return subprocess.Popen(
        [str(paths.bin / shims.SHIM), "-c", script, "shim", "-address", str(address)],
        stdin=subprocess.PIPE,
    )


def test_an_idle_shim_is_stopped_and_a_busy_one_is_left(
    paths: Paths, started: list[subprocess.Popen[bytes]]
) -> None:
    socket = paths.run / "containerd" / "containerd.sock"
    idle = _shim(paths, "read line", socket)
    busy = _shim(paths, "sleep 60 & wait", socket)
    elsewhere = _shim(paths, "read line", Path("/run/other/containerd.sock"))
    started += [idle, busy, elsewhere]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not shims.lab_shims(paths).get(busy.pid):
        time.sleep(0.05)  # until sh has started its sleep
    assert shims.lab_shims(paths) == {idle.pid: False, busy.pid: True}
    said: list[str] = []
    assert shims.stop_orphaned_shims(paths, said.append) == []
    assert idle.wait(timeout=10) is not None
    assert busy.poll() is None and elsewhere.poll() is None
    assert said == [f"  stopped an orphaned {shims.SHIM} (pid {idle.pid}): it served no sandbox"]
