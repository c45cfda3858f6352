"""Stop when resolved: the rule `abtest gates --until-resolved` applies at each look. Pure.

A sweep that adds blocks until its answers are clear looks at fixed block counts planned in
advance (``rounds``, ``2 x rounds``, ... up to ``max_rounds``, as the regression gate does) and
stops at the first look where **every** comparison is resolved: its percent-reduction interval
excludes 0 (a difference, with its sign) or is narrower than the precision asked for (no
difference larger than that, if any). Each look is another chance for an interval to miss, so
``alpha = 1 - confidence`` is spent by Bonferroni over the planned looks: every interval, at
every look, is two-sided at ``1 - alpha / max_looks``. By the union bound each comparison's
interval at the look where the sweep stops covers its true value with probability at least
``confidence`` whatever the stopping rule, and a comparison whose true effect is 0 ends
"resolved as non-zero" at most alpha of the time. (Holm across the arms of a table still
applies on top, to the p-values, as in any report.) ``tests/unit/engine/test_until_resolved.py``
measures both by simulation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray

from abtest.config.json_object import json_object
from abtest.errors import UserError
from abtest.stats.compare import Comparison
from abtest.stats.intervals import check_confidence

PLAN_KEY = "until_resolved"  # where a run's plan_json keeps its looks


def look_level(confidence: float, max_looks: int) -> float:
    """Interval level under Bonferroni over the planned looks: ``1 - alpha / max_looks``."""
    check_confidence(confidence)
    if max_looks < 1:
        raise UserError(f"max_looks must be >= 1, got {max_looks}", "--max-rounds")
    return 1.0 - (1.0 - confidence) / max_looks


def check_precision(precision_pct: float | None) -> None:
    if precision_pct is not None and not (0.0 < precision_pct < 200.0):
        raise UserError(
            f"precision {precision_pct!r} % is not a positive width in percent",
            "--precision",
            "give the widest interval that counts as resolved, e.g. 10%",
        )


def resolved_codes(
    lo: NDArray[np.float64], hi: NDArray[np.float64], precision_pct: float | None
) -> NDArray[np.int8]:
    """Elementwise: 1 resolved as a difference (interval excludes 0), 2 resolved as narrow
    (includes 0 but narrower than ``precision_pct``), 0 unresolved; NaN bounds are unresolved."""
    lo_a, hi_a = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        excludes = (lo_a > 0.0) | (hi_a < 0.0)
        narrow = (
            (hi_a - lo_a) < precision_pct if precision_pct is not None else np.zeros_like(excludes)
        )
    return np.where(excludes, 1, np.where(narrow, 2, 0)).astype(np.int8)


def resolution(c: Comparison, precision_pct: float | None) -> str:
    """``difference``, ``narrow`` or ``unresolved`` for one comparison (no interval: unresolved)."""
    if c.pct_ci is None:
        return "unresolved"
    code = int(resolved_codes(np.array([c.pct_ci[0]]), np.array([c.pct_ci[1]]), precision_pct)[0])
    return ("unresolved", "difference", "narrow")[code]


def unresolved(comparisons: Iterable[Comparison], precision_pct: float | None) -> list[Comparison]:
    return [c for c in comparisons if resolution(c, precision_pct) == "unresolved"]


@dataclass(frozen=True)
class SequentialPlan:
    """The looks of a run that stops when resolved, as stored in its plan_json."""

    looks: tuple[int, ...]  # block counts planned before the first look
    looks_taken: int
    blocks: int  # blocks measured when it stopped
    confidence: float  # the family level asked for
    look_confidence: float  # the corrected level every interval uses
    precision_pct: float | None
    metrics: tuple[str, ...]
    resolved: bool  # every comparison resolved when it stopped

    def describe(self) -> str:
        precision = (
            f" or is narrower than {self.precision_pct:g} percentage points"
            if self.precision_pct is not None
            else ""
        )
        outcome = "every comparison resolved" if self.resolved else "not all resolved at the cap"
        return (
            f"Stopped when resolved: looks planned at {', '.join(map(str, self.looks))} blocks; "
            f"took {self.looks_taken} of {len(self.looks)} ({self.blocks} blocks, {outcome}). "
            f"A comparison is resolved when its interval excludes 0{precision} "
            f"({', '.join(self.metrics)}). Intervals are at {self.look_confidence * 100:.4g}% = "
            f"1 - {1 - self.confidence:.3g} / {len(self.looks)} looks (Bonferroni over the "
            f"planned looks), so each keeps {self.confidence * 100:.4g}% coverage at the look "
            "where the run stopped."
        )

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def sequential_plan(
    looks: Sequence[int],
    *,
    looks_taken: int,
    blocks: int,
    confidence: float,
    precision_pct: float | None,
    metrics: Sequence[str],
    resolved: bool,
) -> SequentialPlan:
    return SequentialPlan(
        tuple(int(x) for x in looks),
        looks_taken,
        blocks,
        confidence,
        look_level(confidence, len(looks)),
        precision_pct,
        tuple(metrics),
        resolved,
    )


def sequential_plan_of(plan_json: object, confidence: float) -> SequentialPlan | None:
    """The looks stored in a run's plan_json, re-levelled for the ``confidence`` asked for now
    (None for a run that did not stop when resolved)."""
    data = json_object(plan_json) if isinstance(plan_json, str) else None
    stored = data.get(PLAN_KEY) if data else None
    if not isinstance(stored, dict):
        return None
    try:
        looks = [int(x) for x in stored["looks"]]
        if not looks or min(looks) < 1:
            raise ValueError("no looks, or a look at less than one block")
        precision = stored.get("precision_pct")
        found = sequential_plan(
            looks,
            looks_taken=int(stored["looks_taken"]),
            blocks=int(stored["blocks"]),
            confidence=confidence,
            precision_pct=None if precision is None else float(precision),
            metrics=[str(m) for m in stored.get("metrics", ())],
            resolved=bool(stored.get("resolved")),
        )
    except (KeyError, TypeError, ValueError, OverflowError, UserError) as exc:
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:80]  # one line
        # the run's intervals are at a level these looks set: junk here is no plain run
        raise UserError(
            f"the run's stored plan has a malformed {PLAN_KEY!r} entry ({why})",
            "plan_json",
            "the run's database row was changed by hand or by a bad import",
        ) from None
    return found
