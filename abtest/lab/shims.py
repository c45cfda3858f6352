"""containerd shims the lab's containerd lost track of.

A runc shim serves one sandbox and outlives containerd on purpose (a containerd restart must
not kill the pods). When containerd 1.7 removes a sandbox while its start is still under way
(a round's pods deleted mid-start, as a stopped sweep does), it can forget a shim that serves
nothing any more: no child process, no sandbox that `crictl pods` lists. `lab down` would then
find it still running and leave the run directory behind. Such a shim is the lab's own (its
binary is the lab's, its socket address is under the lab's run directory) and holds nothing,
so `down` stops it by pid once containerd is stopped; a shim with a child still runs a
container and is left alone and reported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from abtest.lab.layout import Paths, Say
from abtest.lab.processes import each_process

SHIM = "containerd-shim-runc-v2"
STOP_WAIT_S = 5.0


def _children(pid: int) -> bool:
    for _, stat in each_process(lambda entry: (entry / "stat").read_text()):
        # the command name is in parentheses and may hold spaces: the ppid follows the last ")"
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            return True
    return False


def _address(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == "-address":
            return argv[i + 1]
    return None


def _exe_and_argv(entry: Path) -> tuple[Path, list[str]]:
    exe = Path(os.readlink(entry / "exe"))
    return exe, (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")


def lab_shims(paths: Paths) -> dict[int, bool]:
    """The lab's shims still running: pid -> whether it has a child (serves a container)."""
    binary = (paths.bin / SHIM).resolve()
    run = str(paths.run.resolve()) + "/"
    found: dict[int, bool] = {}
    for pid, (exe, argv) in each_process(_exe_and_argv):
        address = _address(argv)
        if exe == binary and address is not None and address.startswith(run):
            found[pid] = _children(pid)
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it exited on its own meanwhile
        os.kill(pid, sig)


def stop_orphaned_shims(paths: Paths, say: Say) -> list[str]:
    """Stop, by pid, every shim of the lab's that serves no process (containerd stopped
    first). Returns a line for each one that would not stop."""
    problems: list[str] = []
    for pid, busy in sorted(lab_shims(paths).items()):
        if busy:
            continue  # a container still runs under it: residue reports it
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and pid in lab_shims(paths):
            time.sleep(0.1)
        if pid in lab_shims(paths):
            _signal(pid, signal.SIGKILL)
            time.sleep(0.5)
        if pid in lab_shims(paths):
            problems.append(f"an orphaned {SHIM} (pid {pid}) would not stop")
        else:
            say(f"  stopped an orphaned {SHIM} (pid {pid}): it served no sandbox")
    return problems
