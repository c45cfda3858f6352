"""What the first `lab up` shows while it builds for many minutes: each step's elapsed time,
an estimate of what is left, and at the end what was built and where it is cached.

On a terminal a rich progress display (one line per step, live elapsed time, a bar against
the estimate); otherwise (CI logs, pipes) plain lines: a start and end line per step and one
"still building" line every ``PLAIN_EVERY_S``. Estimates are this machine's last build times
(``build-times.json`` in the cache) or, the first time, times measured on the 2-core lab.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

# Seconds on the 2-core lab machine, first build (empty Go build cache); later builds of a
# set reuse compiled packages, so these are what a fresh machine waits.
DEFAULT_ESTIMATES_S = {
    "modules": 120.0,
    "kube-apiserver": 424.0,
    "kube-scheduler": 63.0,
    "kube-controller-manager": 147.0,
    "kubelet": 72.0,
    # a patched kubelet (`lab kubelets v1.36.3+agc`): the copy of the release's source and
    # `git apply`, then every k8s.io/kubernetes package the kubelet imports compiled from the
    # copy (staging modules and other dependencies come from the release build's cache)
    "patches": 15.0,
    "kubelet+series": 300.0,
    # `lab kubelets BUILD --go-test`: the series' touched packages vetted and tested
    "go vet": 120.0,
    "go test": 420.0,
    "etcd": 91.0,
    "crictl": 40.0,
    # containerd, its shim and ctr: ~4.5 CPU-minutes of compiling (measured from an empty
    # cache at nice 19 with one Go thread on a machine loaded 20x over: 20 min of wall time)
    "containerd": 300.0,
    # toxiproxy's server (`lab up --api-latency`'s proxy): ~25 s from the module proxy here
    "toxiproxy-server": 25.0,
}
PLAIN_EVERY_S = 30.0
POLL_S = 0.5


def minutes(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


@dataclass
class Step:
    name: str
    estimate_s: float
    elapsed_s: float | None = None  # set when done


@dataclass
class BuildProgress:
    """Steps in order; within ``step(name)``, ``call(argv)`` runs a command under the display."""

    steps: list[Step]
    say: Callable[[str], None]
    times_file: Path
    live: bool = False
    #: what is built (``k8s v1.36.3``, ``v1.36.3+agc``): names the steps in CI's time table
    what: str = ""
    _progress: Progress | None = field(default=None, repr=False)
    _tasks: dict[str, TaskID] = field(default_factory=dict, repr=False)
    _total: TaskID | None = field(default=None, repr=False)
    _current: Step | None = field(default=None, repr=False)
    _started: float = field(default=0.0, repr=False)
    _last_line: float = field(default=0.0, repr=False)  # elapsed at the last plain line

    @classmethod
    def for_steps(
        cls,
        names: Sequence[str],
        say: Callable[[str], None],
        times_file: Path,
        live: bool | None = None,
        what: str = "",
    ) -> BuildProgress:
        """The steps ``names``, each estimated from its last recorded time (else a default)."""
        known = _read_times(times_file)
        steps = [Step(n, known.get(n, DEFAULT_ESTIMATES_S.get(n, 120.0))) for n in names]
        return cls(steps, say, times_file, sys.stdout.isatty() if live is None else live, what)

    def left_s(self, current: Step | None = None, current_elapsed: float = 0.0) -> float:
        """Estimated seconds still to go: the current step's rest and every step not begun."""
        left = 0.0
        for step in self.steps:
            if step.elapsed_s is not None:
                continue
            if step is current:
                left += max(step.estimate_s - current_elapsed, 0.0)
            else:
                left += step.estimate_s
        return left

    @contextmanager
    def display(self) -> Iterator[BuildProgress]:
        total = sum(s.estimate_s for s in self.steps)
        self.say(
            f"about {minutes(total)} in all ({len(self.steps)} steps), "
            f"estimated from {self._basis()}"
        )
        if not self.live:
            yield self
            return
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<26}"),
            BarColumn(bar_width=24),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
            console=Console(file=sys.stdout),
            transient=False,
        )
        self._progress = progress
        with progress:
            for step in self.steps:
                self._tasks[step.name] = progress.add_task(
                    step.name,
                    total=step.estimate_s,
                    start=False,
                    note=f"~{minutes(step.estimate_s)}",
                )
            self._total = progress.add_task("all", total=None, note=f"about {minutes(total)} left")
            yield self
        self._progress = None

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """One step: announced, timed, and recorded as this machine's estimate when it ends."""
        step = next(s for s in self.steps if s.name == name)
        self._current, self._started, self._last_line = step, time.monotonic(), 0.0
        if self._progress is None:
            self.say(f"  {name} ... (usually ~{minutes(step.estimate_s)} here)")
        else:
            self._progress.start_task(self._tasks[name])
        try:
            yield
        finally:
            self._current = None
        step.elapsed_s = time.monotonic() - self._started
        self._done(step)

    def call(self, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
        """Run one command of the current step, ticking the display; (exit code, output)."""
        with subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc:
            output = _drain_while(proc, self._tick_current)
        return proc.returncode, output

    def _tick_current(self) -> None:
        if self._current is not None:
            self._tick(self._current, time.monotonic() - self._started)

    def _tick(self, step: Step, elapsed: float) -> None:
        if self._progress is not None:
            # The bar follows the estimate and waits at 99 % if the step runs long.
            self._progress.update(
                self._tasks[step.name], completed=min(elapsed, step.estimate_s * 0.99)
            )
            if self._total is not None:
                left = self.left_s(step, elapsed)
                self._progress.update(self._total, note=f"about {minutes(left)} left")
            return
        if elapsed - self._last_line >= PLAIN_EVERY_S:
            self._last_line = elapsed
            self.say(
                f"  still building {step.name}: {minutes(elapsed)} so far; "
                f"about {minutes(self.left_s(step, elapsed))} left in all"
            )

    def _done(self, step: Step) -> None:
        assert step.elapsed_s is not None
        log_time("build", f"{self.what} {step.name}".strip(), step.elapsed_s)
        if self._progress is not None:
            task = self._tasks[step.name]
            self._progress.update(
                task,
                total=step.elapsed_s,
                completed=step.elapsed_s,
                note=f"done in {minutes(step.elapsed_s)}",
            )
            self._progress.stop_task(task)
            if self._total is not None:
                self._progress.update(self._total, note=f"about {minutes(self.left_s())} left")
        else:
            self.say(
                f"  {step.name} done in {minutes(step.elapsed_s)}; "
                f"about {minutes(self.left_s())} left"
            )
        _write_times(self.times_file, {step.name: step.elapsed_s})

    def summary(self, directory: Path, built: Sequence[str], build_cache: Path) -> list[str]:
        took = sum(s.elapsed_s or 0.0 for s in self.steps)
        lines = [f"built {', '.join(built)} in {minutes(took)}:"]
        for step in self.steps:
            if step.elapsed_s is not None:
                lines.append(f"  {step.name:<26} {minutes(step.elapsed_s)}")
        lines.append(f"cached in {directory} (later `lab up`s reuse it; delete it to rebuild)")
        lines.append(f"module downloads and build files in {build_cache} and Go's own caches")
        return lines

    def _basis(self) -> str:
        return "this machine's last build" if self.times_file.exists() else "the 2-core lab's build"


def _drain_while(proc: subprocess.Popen[str], tick: Callable[[], None]) -> str:
    """Collect the command's output while calling ``tick`` every POLL_S until it exits."""
    chunks: list[str] = []
    stream: IO[str] | None = proc.stdout
    assert stream is not None
    # A thread drains the pipe so a chatty command never blocks on a full pipe buffer.
    reader = threading.Thread(target=lambda: chunks.append(stream.read()), daemon=True)
    reader.start()
    while True:
        try:
            proc.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            tick()
    reader.join()
    return "".join(chunks)


def _read_times(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # a damaged estimate file only costs the estimate: the defaults stand in
    return (
        {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}
        if isinstance(data, dict)
        else {}
    )


def _write_times(path: Path, new: dict[str, float]) -> None:
    times = {**_read_times(path), **{k: round(v, 1) for k, v in new.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(times, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


#: a file each finished build step is appended to (CI's time table: .ci/run sets it)
TIMINGS_ENV = "ABTEST_TIMINGS"


def log_time(kind: str, name: str, seconds: float) -> None:
    """One ``kind<TAB>name<TAB>seconds`` line in $ABTEST_TIMINGS, when it is set: CI's table
    of where its time went names every binary it built, inside `lab up` or a test."""
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as out:
        out.write(f"{kind}\t{name}\t{seconds:.1f}\n")
