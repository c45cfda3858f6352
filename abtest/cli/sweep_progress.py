"""What a running sweep shows: a rich progress display on a terminal, one plain line per
round otherwise; and the closing per-size summary."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from abtest.cli.render import echo, err_console
from abtest.cli.terminal import visible
from abtest.config.paths import write_output
from abtest.stats.means import ArmMean, arm_means

if TYPE_CHECKING:  # a type in a signature; the CLI calls no engine
    from abtest.engine.sweep_plan import SweepPlan


class SweepDisplay:
    """Shows the events of :func:`abtest.app.gates.sweep_gates`; the plan (and so
    the number of rounds) arrives with its first event."""

    def __init__(self, json_out: bool, run_id_file: Path | None) -> None:
        self.plan: SweepPlan | None = None
        self.total = 0
        self.done = 0
        self.run_id_file = run_id_file
        self.live = sys.stderr.isatty() and not json_out
        self.progress: Progress | None = None
        self.task: Any = None
        self.last = ""
        self.t0 = time.monotonic()

    def __enter__(self) -> SweepDisplay:
        if self.live:
            self.progress = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=err_console,
            )
            self.progress.__enter__()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.progress is not None:
            self.progress.__exit__(t, e, tb)

    def _line(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text, highlight=False)
        else:
            stamp = time.strftime("%H:%M:%S")
            echo(f"[{stamp}] {text}", err=True)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "plan":
            self.plan = data["plan"]
            self.total = len(self.plan.schedule.slots) * len(self.plan.profiles)
            if self.progress is not None:
                self.task = self.progress.add_task("starting", total=self.total)
        elif kind == "run" and self.plan is not None:
            verb = "resuming" if data["resumed"] else "run"
            self._line(
                f"{verb} {data['run_id']}: {len(self.plan.arms)} arms, "
                f"{self.plan.schedule.blocks} blocks, sizes {list(self.plan.schedule.sizes)}"
            )
            if self.run_id_file:
                write_output(self.run_id_file, data["run_id"] + "\n", "--run-id-file")
        elif kind == "apply":
            self._describe(f"block {data['block'] + 1} · {data['arm']} · applying")
        elif kind == "applied":
            secs = data.get("restart_to_verified_s")
            self._line(
                f"{data['node']}: {data['arm']} in effect"
                + (f" ({secs:.1f} s restart→verified)" if secs else "")
            )
        elif kind == "round_start":
            s = data["slot"]
            warm = " warm-up" if s.warmup else ""
            self._describe(f"block {s.block + 1} · {s.arm} · {s.size} pods{warm} · {self.last}")
        elif kind == "round_done":
            s, r = data["slot"], data["result"]
            self.done += 1
            ready = r.summary.batch_ready_s
            self.last = f"last {ready:.2f} s" if ready is not None else "last: not ready"
            status = "accepted" if r.accepted else f"REJECTED ({r.reason})"
            self._line(
                f"{data['node']} block {s.block + 1} {s.arm} {s.size} pods"
                f"{' warm-up' if s.warmup else ''}: batch ready "
                f"{'-' if ready is None else f'{ready:.3f} s'}, {status} "
                f"[{self.done}/{self.total}]"
            )
            if self.progress is not None:
                self.progress.update(self.task, completed=self.done)
        elif kind == "placement":
            self._line(data["msg"])
        elif kind in ("arm_failed",):
            self._line(f"{data['node']}: arm {data['arm']} FAILED to apply: {data['reason']}")
        elif kind == "restore":
            self._line(f"{data['node']}: restoring the original kubelet config")
        elif kind == "restored":
            self._line(f"{data['node']}: original config back, kubelet healthy")
        elif kind == "look":
            self._line(
                f"look {data['look']}/{len(data['looks'])}: up to {data['blocks']} blocks "
                f"(intervals at {data['level'] * 100:.4g}%)"
            )
        elif kind == "look_done":
            state = "all resolved" if data["resolved"] else f"open: {', '.join(data['open'])}"
            self._line(f"look {data['look']} ({data['blocks']} blocks): {state}")
        elif kind == "end":
            self._line(
                f"run {data['run_id']} {data['status']}"
                + (f": {data['reason']}" if data.get("reason") else "")
            )

    def _describe(self, text: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=visible(text))


def summary_rows(rounds: pd.DataFrame) -> tuple[list[str], list[list[Any]]]:
    """Per size: each arm's mean batch ready time and percent change vs baseline
    (accepted, non-warm-up rounds; the full report has the intervals)."""
    return summary_table(arm_means(rounds))


def summary_table(means: Sequence[ArmMean]) -> tuple[list[str], list[list[Any]]]:
    headers = ["size", "arm", "rounds", "mean batch ready (s)", "change vs baseline"]
    rows: list[list[Any]] = [
        [
            m.size,
            m.arm,
            m.rounds,
            round(m.mean_s, 3),
            "" if m.change_pct is None else f"{m.change_pct:+.1f} %",
        ]
        for m in means
    ]
    return headers, rows
