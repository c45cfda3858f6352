"""Number formatting shared by the tables and the plots' captions. No statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from abtest.errors import NO_VARIATION, TOO_SMALL

DASH = "\u2013"  # en dash: no value


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def num(value: float | None, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if finite(value) else DASH


def signed(value: float | None, digits: int = 3) -> str:
    return f"{value:+.{digits}f}" if finite(value) else DASH


def no_interval(note: str) -> str:
    """What to print instead of an interval: stats' own reason, shortened."""
    if TOO_SMALL in note or "n too small" in note:
        return "n too small"
    if NO_VARIATION in note:
        return "no variation"
    return "no interval"


def with_ci(
    value: float | None,
    ci: tuple[float, float] | None,
    note: str = "",
    digits: int = 3,
    sign: bool = False,
) -> str:
    """``2.260 [2.101, 2.419]``, or ``2.260 (n too small)`` when stats gave no interval."""
    if not finite(value):
        return DASH
    show = signed if sign else num
    if ci is None:
        return f"{show(value, digits)} ({no_interval(note)})"
    return f"{show(value, digits)} [{show(ci[0], digits)}, {show(ci[1], digits)}]"


# The MDE is the run's sensitivity, never a bound on the effect: "< 20.7 if any" beside
# "12.6 [-0.4, 24.0]" read as a bound the interval itself exceeds (issue 26). What the data
# rule out is the interval; the MDE says what the run could have caught.
SENSITIVITY_HEADER = "Could detect % (80 % power)"
SENSITIVITY_NOTE = (
    "Could detect %: the run's sensitivity, the change (either way) it would have detected "
    "80 % of the time at this level, from the comparison's own per-block noise (paired only). "
    "It is not a bound on the effect: what the data rule out is what lies outside the "
    "interval; where the interval includes 0 no change was shown, and a change as large as "
    "either bound is still possible."
)


def detectable_cell(mde_pct: float | None, pct_ci: tuple[float, float] | None) -> str:
    """The run's sensitivity beside an interval, ``12.3`` (a dash without an interval)."""
    if pct_ci is None or not finite(mde_pct):
        return DASH
    assert mde_pct is not None
    return f"{mde_pct:.1f}"


def excluded_text(ci: tuple[float, float], what: str = "reductions") -> str:
    """What an interval rules out, in words: its bounds, never the MDE."""
    return f"the interval excludes {what} below {ci[0]:+.1f} % and above {ci[1]:+.1f} %"


def p_value(p: float | None) -> str:
    if not finite(p):
        return DASH
    assert p is not None
    if p < 0.0001:
        return "<0.0001"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}".rstrip("0").rstrip(".")


def ms(seconds: float | None) -> str:
    return f"{seconds * 1000.0:.1f}" if finite(seconds) and seconds is not None else DASH


def level(confidence: float) -> str:
    """0.95 -> ``95%``; 0.975 -> ``97.5%``."""
    text = f"{confidence * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"


@dataclass(frozen=True)
class Table:
    key: str  # stable anchor, e.g. "batch-ready"
    title: str
    columns: tuple[str, ...]
    align: tuple[str, ...]  # "l" or "r" per column
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


TEXT_COLUMNS = frozenset({"Note", "Failure reasons", "Why", "Kind"})


def make_table(
    key: str,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    left: int = 1,
    notes: Sequence[str] = (),
) -> Table:
    """A table whose first ``left`` columns and its text columns (``TEXT_COLUMNS``) are
    left-aligned, the numbers right-aligned."""
    return Table(
        key=key,
        title=title,
        columns=tuple(columns),
        align=tuple("l" if i < left or c in TEXT_COLUMNS else "r" for i, c in enumerate(columns)),
        rows=tuple(tuple(r) for r in rows),
        notes=tuple(_sentence(n) for n in notes if n),
    )


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", ")")) else text + "."


class MeanCell(Protocol):
    """A table cell's mean of ``n`` rounds with its interval (``note``: why it has none)."""

    @property
    def n(self) -> int: ...

    @property
    def mean(self) -> float: ...

    @property
    def ci(self) -> tuple[float, float] | None: ...

    @property
    def note(self) -> str: ...


def usual_n(cells: Sequence[MeanCell]) -> int:
    """The n most of a table's cells have (0 for none): :func:`mean_cell` shows any other."""
    counts = [c.n for c in cells]
    return max(set(counts), key=counts.count) if counts else 0


def mean_cell(cell: MeanCell | None, usual: int) -> str:
    """``2.260 [2.101, 2.419]``, with ``(n=7)`` when n is not the table's usual; a dash for
    no cell."""
    if cell is None:
        return DASH
    text = with_ci(cell.mean, cell.ci, cell.note)
    return text if cell.n == usual else f"{text} (n={cell.n})"
