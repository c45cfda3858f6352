"""Start, watch and stop the lab's processes, always by the pid we recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from abtest.errors import LabError

T = TypeVar("T")


def free_port(preferred: int | None = None, taken: set[int] | None = None) -> int:
    """The preferred port if nothing listens on it on loopback, else one the kernel picks."""
    taken = taken or set()
    if preferred and preferred not in taken and _bindable(preferred):
        return preferred
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            return port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pid_file(pids_dir: Path, name: str) -> Path:
    return pids_dir / f"{name}.pid"


def read_pid(pids_dir: Path, name: str) -> int | None:
    path = pid_file(pids_dir, name)
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def alive(pid: int | None, expect: str | None = None) -> bool:
    """Is this pid running, and (when given) is it the program we started, not a reused pid?"""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return expect is None or expect.encode() in cmdline


def each_process(read: Callable[[Path], T]) -> Iterator[tuple[int, T]]:
    """(pid, what ``read`` makes of its /proc/PID directory) for every process on this
    machine. The one walk of /proc the lab's process searches share: a process that exits
    while it is read (an OSError) is passed over."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            seen = read(entry)
        except OSError:
            continue  # exited while we looked
        yield int(entry.name), seen


def pids_of_uid(uid: int) -> list[int]:
    """Live processes whose real uid is `uid` (zombies excluded)."""
    found = []
    for pid, status in each_process(lambda entry: (entry / "status").read_text()):
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").strip().startswith("Z"):
            continue
        if int(fields.get("Uid", "-1 0").split()[0]) == uid:
            found.append(pid)
    return found


def start(
    name: str,
    argv: Sequence[str],
    log: Path,
    pids_dir: Path,
    netns: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start a daemon in its own session, output appended to its log, pid recorded."""
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = list(argv)
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    with log.open("ab") as out:
        out.write(f"\n--- abtest lab: starting {name} at {time.ctime()} ---\n".encode())
        out.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
    pid_file(pids_dir, name).write_text(f"{proc.pid}\n")
    return proc.pid


KILL_WAIT_S = 10.0


def stop(
    name: str, pids_dir: Path, expect: str, timeout: float = 15.0, kill_wait: float = KILL_WAIT_S
) -> bool:
    """SIGTERM our recorded pid, SIGKILL after `timeout`. True if something was stopped.

    A process can outlive SIGKILL for a while (uninterruptible sleep in the kernel, e.g. a
    hung mount): after `kill_wait` seconds this gives up with a LabError naming the pid
    and its state rather than waiting forever; the pid file is kept so `status` shows it."""
    pid = read_pid(pids_dir, name)
    path = pid_file(pids_dir, name)
    if not alive(pid, expect):
        path.unlink(missing_ok=True)
        return False
    assert pid is not None
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _presence(pid, expect) != "gone":
        _reap(pid)
        time.sleep(0.1)
    if _presence(pid, expect) != "gone":
        if _presence(pid, expect) == "ours":
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + kill_wait
        while _presence(pid, expect) != "gone":
            if time.monotonic() > deadline:
                raise LabError(
                    f"{name} (pid {pid}, state {_proc_state(pid)}) still running "
                    f"{kill_wait:.0f} s after SIGKILL (and {timeout:.0f} s after SIGTERM); "
                    f"waited for it to exit; its pid file {path} is kept"
                )
            _reap(pid)
            time.sleep(0.05)
    path.unlink(missing_ok=True)
    return True


def _presence(pid: int, expect: str) -> str:
    """ "ours" (our program), "exiting" (its memory, so its cmdline, is already released
    but it still holds its files and ports) or "gone" (exited, a zombie, or the pid now
    belongs to another program: never signal that)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = _proc_state(pid)
    except OSError:
        return "gone"
    if state in ("Z", "gone"):
        return "gone"
    if expect.encode() in cmdline:
        return "ours"
    return "exiting" if not cmdline else "gone"


def _signal(pid: int, sig: signal.Signals) -> None:
    # It may have exited between the liveness check and the signal: then there is nothing
    # left to signal, which is what we wanted.
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return "gone"


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # not our child: init reaps it
        os.waitpid(pid, os.WNOHANG)


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    still_running: Callable[[], bool] | None = None,
    log: Path | None = None,
) -> float:
    """Poll check() until true; fail early with the log tail if the process died."""
    start_t = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - start_t
        except Exception:
            pass
        if still_running is not None and not still_running():
            raise LabError(f"{what} died during start-up{log_tail(log)}")
        if time.monotonic() - start_t > timeout:
            raise LabError(f"{what} not healthy after {timeout:.0f} s{log_tail(log)}")
        time.sleep(0.2)


def log_tail(log: Path | None, lines: int = 20) -> str:
    if log is None or not log.exists():
        return ""
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- last {len(tail)} lines of {log} ---\n" + "\n".join(tail)


def run(argv: Sequence[str], check: bool = True, input_text: str | None = None) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, input=input_text)
    if check and proc.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout
