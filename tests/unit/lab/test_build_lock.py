"""One build at a time in the cache (abtest/lab/build_lock.py): a second build waits for the
first, says so, and a killed holder never leaves the lock held."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from abtest.lab.build_lock import build_lock

HOLD = """
import sys, time
from pathlib import Path
from abtest.lab.build_lock import build_lock
with build_lock(Path(sys.argv[1]), print):
    Path(sys.argv[2]).touch()
    while not Path(sys.argv[3]).exists():
        time.sleep(0.02)
"""


def _holder(cache: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], Path]:
    held, done = tmp / "held", tmp / "done"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(cache), str(held), str(done)])
    deadline = time.monotonic() + 30
    while not held.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the holder never held it"
        time.sleep(0.02)
    return proc, done


def test_a_second_build_waits_for_the_first_and_names_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    proc, done = _holder(cache, tmp_path)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        done.touch()  # told it waits: let the first build finish

    with build_lock(cache, say):
        assert proc.wait(30) == 0, "entered only after the holder let go"
    assert said == [f"waiting for another build in {cache} (pid {proc.pid}) to finish"]


def test_a_killed_holder_leaves_the_lock_free(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    proc, _ = _holder(cache, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    said: list[str] = []
    with build_lock(cache, said.append):
        pass
    assert said == []
