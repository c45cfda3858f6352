"""A bisection as its report and the command show it: the steps as stored, the conclusion, and
each build's time with its interval along the range.

A bisection's runs carry a ``bisect`` entry in their stored plan (the first run, the endpoint
confirmation, also the request); :class:`StepRecord` is that entry's decision part, written by
`abtest bisect` when a measurement decides and read back, checked whole, for ``--resume`` and
`abtest report` (:mod:`abtest.app.bisect_state`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from abtest.stats.intervals import one_sample_t

ENTRY = "bisect"  # the plan_json key every run of a bisection carries
KIND = "bisect"  # the kind of every run of a bisection
VERDICTS = ("CULPRIT", "NOT_CONFIRMED", "SPREAD", "UNRESOLVED", "UNFINISHED")


@dataclass(frozen=True)
class Span:
    """An estimate in percent with its interval (None bounds: no interval)."""

    est: float
    lo: float | None
    hi: float | None

    def text(self) -> str:
        if self.lo is None or self.hi is None:
            return f"{self.est:+.1f} % (no interval)"
        return f"{self.est:+.1f} % [{self.lo:+.1f}, {self.hi:+.1f}]"

    @staticmethod
    def of(est: float, lo: float, hi: float) -> Span:
        def clean(v: float) -> float | None:
            return None if not math.isfinite(v) else float(v)

        return Span(float(est), clean(lo), clean(hi))


@dataclass(frozen=True)
class StepRecord:
    """One measurement of a bisection: index 0 the endpoint confirmation (outcome the gate's
    PASS / FAIL / INCONCLUSIVE), then the steps (GOOD / BAD / SPREAD / UNRESOLVED)."""

    index: int
    run_id: str
    builds: tuple[str, ...]  # (good, bad), or (low, mid, high)
    outcome: str
    #: what was compared: "bad vs good", or "mid vs low" and "high vs mid": slowdowns
    spans: tuple[tuple[str, Span], ...]
    blocks: int
    looks: int
    wall_s: float
    level: float  # the level of the intervals (the look's Bonferroni level)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "run_id": self.run_id,
            "builds": list(self.builds),
            "outcome": self.outcome,
            "spans": [[name, s.est, s.lo, s.hi] for name, s in self.spans],
            "blocks": self.blocks,
            "looks": self.looks,
            "wall_s": self.wall_s,
            "level": self.level,
        }


@dataclass(frozen=True)
class BuildTime:
    """A build's metric over every round it ran in the bisection, mean and 95 % interval."""

    build: str
    n: int
    mean_s: float
    lo_s: float | None
    hi_s: float | None


@dataclass(frozen=True)
class Conclusion:
    verdict: str  # one of VERDICTS
    culprit: str | None
    step: Span | None  # the culprit's own step (the last step's half it ended on)
    message: str


@dataclass(frozen=True)
class BisectModel:
    root: str
    builds: tuple[str, ...]
    size: int
    metric: str
    margin_pct: float
    steps: tuple[StepRecord, ...]
    conclusion: Conclusion
    times: tuple[BuildTime, ...]

    @property
    def blocks(self) -> int:
        return sum(s.blocks for s in self.steps)

    @property
    def wall_s(self) -> float:
        return sum(s.wall_s for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        c = self.conclusion
        return {
            "bisection": self.root,
            "builds": list(self.builds),
            "size": self.size,
            "metric": self.metric,
            "verdict": c.verdict,
            "culprit": c.culprit,
            "culprit_step_pct": None if c.step is None else [c.step.est, c.step.lo, c.step.hi],
            "message": c.message,
            "blocks": self.blocks,
            "node_time_s": round(self.wall_s, 1),
            "steps": [s.to_json() for s in self.steps],
            "times": [vars(t) for t in self.times],
        }


def conclude(builds: Sequence[str], steps: Sequence[StepRecord], done: bool) -> Conclusion:
    """What the steps so far say (``done``: the search has stopped)."""
    if not steps:
        return Conclusion("UNFINISHED", None, None, "nothing measured yet")
    confirm = steps[0]
    total = confirm.spans[0][1] if confirm.spans else None
    if confirm.outcome != "FAIL":
        return Conclusion(
            "NOT_CONFIRMED",
            None,
            None,
            f"{builds[-1]} is not confirmed slower than {builds[0]} beyond the margin "
            f"({confirm.outcome}; {total.text() if total else 'no interval'}): no search",
        )
    low, high = 0, len(builds) - 1
    last_half: Span | None = total
    for step in steps[1:]:
        mid = builds.index(step.builds[1])
        if step.outcome in ("SPREAD", "UNRESOLVED"):
            why = (
                "both halves are slower: the slowdown is spread over several builds"
                if step.outcome == "SPREAD"
                else "neither half is shown slower at the cap: the slowdown is spread thinly "
                "over the range, or too small to place with these blocks"
            )
            return Conclusion(
                step.outcome,
                None,
                None,
                f"between {builds[low]} and {builds[high]} ({step.builds[1]} measured): {why}",
            )
        spans = dict(step.spans)
        if step.outcome == "BAD":
            high, last_half = mid, spans.get("mid vs low")
        else:
            low, last_half = mid, spans.get("high vs mid")
    if high - low > 1 or not done:
        return Conclusion("UNFINISHED", None, None, f"searching {builds[low]} .. {builds[high]}")
    return Conclusion(
        "CULPRIT",
        builds[high],
        last_half,
        f"first bad build: {builds[high]} (after {builds[low]}); its step "
        f"{last_half.text() if last_half else '(no interval)'}, the whole range "
        f"{total.text() if total else '(no interval)'}",
    )


def build_times(rounds: pd.DataFrame, metric: str, order: Sequence[str]) -> tuple[BuildTime, ...]:
    """Each build's ``metric`` over its accepted rounds (columns ``build`` and the metric)."""
    out = []
    for build in order:
        values = rounds.loc[rounds["build"] == build, metric].dropna().to_numpy(dtype=float)
        if len(values) == 0:
            continue
        if len(values) < 2:
            out.append(BuildTime(build, 1, float(values[0]), None, None))
            continue
        t = one_sample_t(values, 0.95)
        lo, hi = float(np.asarray(t.lo)), float(np.asarray(t.hi))
        ok = math.isfinite(lo) and math.isfinite(hi)
        out.append(
            BuildTime(
                build, len(values), float(values.mean()), lo if ok else None, hi if ok else None
            )
        )
    return tuple(out)
