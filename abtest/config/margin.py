"""The regression gate's margin: one rule for `abtest regress --margin`, playbooks and stats.

A leaf module (nothing but the standard library and ``abtest.errors``) so that loading a
playbook does not import the statistics stack.
"""

from __future__ import annotations

import math

from abtest.errors import UserError

MARGIN_TODO = "give the allowed slowdown in percent, 0 to 100 (e.g. 5)"
#: the largest margin: a slowdown of 100 % is twice as slow; a gate that tolerates more
#: passes anything (10^9 % would PASS a kubelet that never starts a pod in time)
MAX_MARGIN_PCT = 100.0


def margin_problem(margin_pct: float) -> str | None:
    """What is wrong with a margin, or None.

    A margin is the slowdown the gate tolerates, so it is a finite percentage from 0 to 100. A
    negative one would demand a speed-up and FAIL an unchanged kubelet; one above 100 % (twice
    as slow) would PASS nearly anything: neither is a regression gate.
    """
    if isinstance(margin_pct, bool) or not math.isfinite(margin_pct):
        return f"margin {margin_pct!r} is not a finite number of percent"
    if margin_pct < 0:
        return f"margin {margin_pct:g} % is negative"
    if margin_pct > MAX_MARGIN_PCT:
        return f"margin {margin_pct:g} % is above {MAX_MARGIN_PCT:g} % (twice as slow)"
    return None


def check_margin(margin_pct: float, where: str) -> float:
    """``margin_pct`` if it passes ``margin_problem``, else UserError at ``where``."""
    problem = margin_problem(margin_pct)
    if problem is not None:
        raise UserError(problem, where, MARGIN_TODO)
    return float(margin_pct)
