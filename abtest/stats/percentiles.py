"""Nearest-rank percentiles, the reference method's definition for per-pod latency.

The nearest-rank P_q of n values is the value at rank ``ceil(q/100 * n)`` in ascending order:
always one of the observed values, no interpolation, so a P95 of 150 pods is the 143rd fastest
pod and can be checked by hand against the stored per-pod timestamps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from abtest.errors import UserError


def nearest_rank(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0 < q <= 100) of ``values``.

    ``rank = ceil(q/100 * n)`` counted from 1 in ascending order; ties are simply repeated values
    in the sorted order. A single value is every percentile of itself.
    """
    if not (0.0 < q <= 100.0) or math.isnan(q):
        raise UserError(f"percentile {q!r} is outside (0, 100]", "nearest_rank", "use e.g. 95")
    ordered = np.sort(np.asarray(list(values), dtype=np.float64))
    n = ordered.size
    if n == 0:
        raise UserError("no values to take a percentile of", "nearest_rank")
    if np.isnan(ordered).any():
        raise UserError("a value is NaN", "nearest_rank", "drop missing values first")
    # q * n / 100 rather than q / 100 * n, and rounded to 9 places, so that 95 % of 100 values
    # is rank 95 and not 96: 0.95 * 100 is 95.00000000000001 in binary floating point.
    rank = math.ceil(round(q * n / 100.0, 9))
    rank = min(max(rank, 1), n)
    return float(ordered[rank - 1])
