"""Draw counts of the calibration simulations (the tests marked ``calibration``).

The fast tier (``scripts/test --unit``) runs each simulation at a size chosen for the tolerance
its assertion leaves: beside each assertion the test states the binomial bound, three standard
errors of the rate it checks at that many draws, and where that band does not fit between the
rate the full-size run measured and the threshold, the fast tier's threshold is widened by it
(``slack``). ``scripts/test --calibration`` sets ``ABTEST_CALIBRATION=full`` and runs them at
the full size, with the assertions exactly as written for it: the figures docs/statistics.md
gives are measured there.
"""

from __future__ import annotations

import math
import os

FULL = os.environ.get("ABTEST_CALIBRATION", "") == "full"


def draws(full: int, fast: int) -> int:
    """``full`` under ``ABTEST_CALIBRATION=full``, else ``fast``."""
    return full if FULL else fast


def sigma3(rate: float, n: int) -> float:
    """Three binomial standard errors of a rate near ``rate`` estimated from ``n`` draws."""
    return 3.0 * math.sqrt(rate * (1.0 - rate) / n)


def slack(rate: float, n: int) -> float:
    """How far past a threshold written for the full size the fast tier's estimate from ``n``
    draws may land: ``sigma3``; none at full size (the assertion as written)."""
    return 0.0 if FULL else sigma3(rate, n)
