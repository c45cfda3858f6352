"""Every number a user gives (a YAML field, a flag, a CSV cell) is finite and in its range, or
refused: a NaN qps removes the rate limit, a NaN deadline never expires, and `rounds: 1000000`
plans for minutes before it fails. The ranges live here, once, so a YAML field and the flag that
overrides it refuse the same values with the same words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from abtest.errors import UserError

SQLITE_INT_MAX = 2**63 - 1  # a seed or count above this overflows the results database


def finite(value: object) -> float | None:
    """``value`` as a float when it is a number (never a boolean) a double holds finitely;
    None for anything else: NaN, infinity (a file's ``1e400`` is read as infinity) and an
    integer beyond a double (``math.isfinite`` raises OverflowError on 401 digits)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Range:
    """Allowed values of one kind of number; ``integer`` refuses floats and booleans."""

    minimum: float
    maximum: float
    integer: bool = False
    unit: str = ""

    def problem(self, value: object) -> str | None:
        """None when ``value`` is allowed, else what is wrong with it (in words)."""
        if isinstance(value, bool):
            return f"expected a number, got {value}"
        if self.integer:
            if not isinstance(value, int):
                return f"expected an integer, got {_shown(value)}"
        elif not isinstance(value, int | float):
            return f"expected a number, got {_shown(value)}"
        number = float(value) if not isinstance(value, int) else value
        if isinstance(number, float) and not math.isfinite(number):
            return f"must be a finite number, got {value}"
        if number < self.minimum or number > self.maximum:
            unit = f" {self.unit}" if self.unit else ""
            return (
                f"must be between {_fmt(self.minimum)} and {_fmt(self.maximum)}{unit}, "
                f"got {_fmt(number)}"
            )
        return None

    def check(self, value: object, where: str, todo: str | None = None) -> None:
        problem = self.problem(value)
        if problem is not None:
            raise UserError(problem, where, todo)


def _fmt(value: float) -> str:
    if isinstance(value, int):
        text = str(value)
        if len(text) <= 20:
            return text
        digits = text.lstrip("-")  # as %.3g would, but float() cannot hold 401 digits
        sign, rest = text[: len(text) - len(digits)], digits[1:3].rstrip("0")
        return f"{sign}{digits[0]}{'.' if rest else ''}{rest}e+{len(digits) - 1}"
    return f"{value:g}"


def shown_number(value: object) -> str:
    """A value a number was expected for, as an error line may quote it: an integer of 401
    digits as ``1.11e+400``, anything else as its repr cut to 40 characters."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _fmt(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


# --- the plan: what `plan` would expand (bounded so planning answers in seconds) -----------
ROUNDS = Range(1, 1000, integer=True, unit="blocks")
MAX_ROUNDS = Range(2, 10_000, integer=True, unit="blocks")
SIZE = Range(1, 10_000, integer=True, unit="pods")
SEED = Range(0, SQLITE_INT_MAX, integer=True)
MAX_SIZES = 50  # batch sizes in one plan
MAX_FACTORS = 64  # factors in one catalog
MAX_SCHEDULED_ROUNDS = 200_000  # arms x sizes x blocks of one sweep

# --- the generator and deadlines ----------------------------------------------------------
QPS = Range(0.001, 1_000_000, unit="creates/s")
CONCURRENCY = Range(1, 100_000, integer=True)
TIMEOUT_S = Range(1, 86_400, unit="s")
OBSERVE_S = Range(0, 3_600, unit="s")
# a round start's random delay: up to a minute (a 1 s relist is the default's period)
START_DITHER_S = Range(0, 60, unit="s")
HEALTH_TIMEOUT_S = Range(1, 86_400, unit="s")

# --- values that reach a node or a port -----------------------------------------------------
PORT = Range(1, 65_535, integer=True)
# a KubeletConfiguration number (kubeAPIQPS, ...): finite and within what Go's int64 holds
SETTING = Range(-SQLITE_INT_MAX, SQLITE_INT_MAX)

# --- measurements read from files ---------------------------------------------------------
# a round's metric in seconds: a start-up time, not 1e308 (overflows the statistics) nor a
# subnormal 1e-320 (its logarithm is not finite)
METRIC_S = Range(1e-9, 1e7, unit="s")


# --- probabilities --------------------------------------------------------------------------
def probability_problem(value: object) -> str | None:
    """A probability a user sets (a significance level, a p-value bound) lies strictly between
    0 and 1: 0 finds nothing ever, 1 or more "finds" a change in pure noise, NaN compares false
    with everything."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a probability, got {_shown(value)}"
    if (number := finite(value)) is None or not 0.0 < number < 1.0:
        shown = _fmt(value) if isinstance(value, int) else repr(value)
        return f"must be strictly between 0 and 1, got {shown}"
    return None


def confidence_problem(value: object) -> str | None:
    """A gate's confidence (a playbook's ``confidence``, and what a stored bisection kept of
    it) lies in [0.5, 1): below a coin's it decides nothing, at 1 its intervals are infinite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a number, got {_shown(value)}"
    if not (math.isfinite(value) and 0.5 <= value < 1):
        return "must be in [0.5, 1)"
    return None


def check_probability(value: object, where: str, todo: str = "e.g. 0.05") -> float:
    if problem := probability_problem(value):
        raise UserError(problem, where, todo)
    return float(value)  # type: ignore[arg-type]
