"""Where the time between rounds goes (issue 15 section 2): named parts of a round's gaps.

A round has two gaps around its measured span (first create -> last Ready + observation
window). ``before``: from the previous round's return in the same visit (the sweep's
bookkeeping: storing it, progress output) to this round's first create request. ``after``: from
the end of the observation window to a clean node (pods gone from the API, the node's sandbox
count back at its pre-round value). The gap between two rounds is one's ``after`` plus the
next one's ``before``.

Parts marked ``summed`` are consecutive laps of one clock, so they add up to their phase's
total exactly; the others are overlapping detail (e.g. how long the API side took while the
node side was being cleaned too, or time spent in node commands) and are not added.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

BEFORE = "before"
AFTER = "after"


@dataclass(frozen=True)
class GapPart:
    phase: str  # before | after
    part: str
    seconds: float
    summed: bool = True  # a lap of the phase (adds up to its total) or overlapping detail


def phase_total(parts: Iterable[GapPart], phase: str) -> float | None:
    """The sum of a phase's laps (None when it has none)."""
    laps = [p.seconds for p in parts if p.phase == phase and p.summed]
    return sum(laps) if laps else None


@dataclass
class Laps:
    """Consecutive laps of one phase: ``lap(name)`` closes the span since the previous lap."""

    phase: str
    clock: Callable[[], float] = time.monotonic
    start: float | None = None
    parts: list[GapPart] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.start is None:
            self.start = self.clock()
        self._last = self.start

    def lap(self, part: str, at: float | None = None) -> float:
        """Close the part ending now (or at ``at``, a time already read); returns its end."""
        now = self.clock() if at is None else at
        self.parts.append(GapPart(self.phase, part, max(0.0, now - self._last)))
        self._last = now
        return now

    def detail(self, part: str, seconds: float | None) -> None:
        """Overlapping detail, not added to the phase's total."""
        if seconds is not None:
            self.parts.append(GapPart(self.phase, part, seconds, summed=False))


def clock_anchor(clock: Callable[[], float] = time.monotonic) -> tuple[float, float]:
    """(wall, mono) read as close together as this machine allows (best of 5)."""
    best: tuple[float, float, float] | None = None
    for _ in range(5):
        a = clock()
        wall = time.time()
        b = clock()
        if best is None or b - a < best[0]:
            best = (b - a, wall, (a + b) / 2)
    assert best is not None
    return best[1], best[2]
