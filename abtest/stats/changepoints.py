"""A node's figure across runs, and where it changed: change points by Apache Otava.

Each run contributes one figure: the geometric mean of its accepted rounds of one arm and size
(the metric is a time, so steps are relative), with a t interval on the log scale. The series
of those figures goes to Otava's detector (``otava.analysis.compute_change_points``: the
E-divisive split and t-test merge of Fleming et al., "Hunter", ICPE 2023); abtest does not
detect change points itself. Each change point found is then described by the step between
the runs on either side of it, up to the neighbouring change points: the ratio of their
geometric means with a Welch interval on the log scale.

Confirmation (issue 37). One slow night is not a change: Otava alone called a last run 20 %
slower than the rest a change point in 58 % of 12-run series. So a level must hold for
``1 + CONFIRM_RUNS`` consecutive runs to count: a change point is *confirmed* when the first run
after it and ``CONFIRM_RUNS`` more stay on the new level (up to the next change point); one
whose new level is the last run or runs of the series and still shorter is *unconfirmed* (more
runs will tell), and reported as such. A shorter level inside the series (a blip: one or two
odd runs, or the first runs of the series) is no level: the change point into it is dropped,
and the one out of it too when the series goes back (the step out is opposite to the step in).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from abtest.errors import UserError
from abtest.stats.intervals import FloatArray

#: Otava's significance level (its own default). A nightly gate pages on what it finds, so the
#: false-alarm rate matters most: on flat series with the lab's noise 0.001 gives a confirmed
#: change point in 1.5 / 1.8 / 2.2 % of 12 / 20 / 40-run series, 0.01 in 9 / 16 / 20 %
#: (tests/unit/stats/test_history_calibration.py; figures in docs/statistics.md).
MAX_PVALUE = 0.001
#: a change point needs runs on both sides of it; Otava's t-test needs two on a side
MIN_RUNS = 6
#: runs after the first changed one that must stay on the new level for a change point to be
#: confirmed (a level of 3 runs); measured in tests/unit/stats/test_history_calibration.py
CONFIRM_RUNS = 2


@dataclass(frozen=True)
class RunFigure:
    run_id: str
    created_at: str
    rounds: int
    value: float  # geometric mean, seconds
    low: float | None  # interval; None for a run with one round
    high: float | None


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first run after the change
    run_id: str
    created_at: str
    before: float  # geometric mean of the runs' figures since the previous change point
    after: float  # ... and up to the next one
    step_pct: float  # (after - before) / before * 100: positive = slower
    step_low: float | None
    step_high: float | None
    pvalue: float
    confirmed: bool = True  # the new level held for 1 + CONFIRM_RUNS runs
    runs_after: int = 0  # runs on the new level (up to the next change point)

    @property
    def slower(self) -> bool:
        return self.step_pct > 0


def run_figure(
    run_id: str, created_at: str, values: Sequence[float], confidence: float = 0.95
) -> RunFigure:
    logs = np.log(np.asarray(values, dtype=np.float64))
    n = len(logs)
    centre = float(np.mean(logs))
    if n < 2:
        return RunFigure(run_id, created_at, n, math.exp(centre), None, None)
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1) * np.std(logs, ddof=1) / math.sqrt(n))
    return RunFigure(
        run_id, created_at, n, math.exp(centre), math.exp(centre - half), math.exp(centre + half)
    )


def detect(values: Sequence[float], max_pvalue: float = MAX_PVALUE) -> list[tuple[int, float]]:
    """Otava's change points of the series: (index of the first point after, p-value)."""
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        raise UserError(
            "`abtest history` needs Apache Otava, which is not installed",
            "abtest history",
            "pip install 'abtest[history]' (or apache-otava) into abtest's environment",
        ) from None

    if len(values) < MIN_RUNS:
        return []
    found, _ = compute_change_points(
        [float(v) for v in values], window_len=50, max_pvalue=max_pvalue, min_magnitude=0.0
    )
    return [(int(cp.index), float(cp.stats.pvalue)) for cp in found]


def _pct(log_ratio: float) -> float:
    return (math.exp(log_ratio) - 1) * 100


def _step(
    before: Sequence[float], after: Sequence[float], confidence: float
) -> tuple[float, float | None, float | None]:
    lb, la = np.log(np.asarray(before)), np.log(np.asarray(after))
    diff = float(np.mean(la) - np.mean(lb))
    if len(lb) < 2 or len(la) < 2:
        return _pct(diff), None, None
    vb, va = float(np.var(lb, ddof=1)) / len(lb), float(np.var(la, ddof=1)) / len(la)
    se = math.sqrt(vb + va)
    if se == 0:
        return _pct(diff), None, None
    df = (vb + va) ** 2 / (vb**2 / (len(lb) - 1) + va**2 / (len(la) - 1))
    half = float(sps.t.ppf(0.5 + confidence / 2, df)) * se
    return _pct(diff), _pct(diff - half), _pct(diff + half)


def confirm(
    values: Sequence[float], found: Sequence[tuple[int, float]], runs: int = CONFIRM_RUNS
) -> list[tuple[int, float]]:
    """Otava's change points without the blips (module docstring): a level shorter than
    ``1 + runs`` runs inside the series is no level. The last level may be short (unconfirmed)."""
    logs = np.log(np.asarray(values, dtype=np.float64))
    need = 1 + runs
    kept = list(found)
    changed = True
    while changed:  # dropping one blip can make its neighbours' levels longer: repeat
        changed = False
        edges = [0, *(i for i, _ in kept), len(logs)]
        for k in range(len(edges) - 2):  # every level but the last
            start, end = edges[k], edges[k + 1]
            if end - start >= need:
                continue
            drop = {k - 1, k} if k > 0 and _goes_back(logs, edges, k) else {max(k - 1, 0)}
            if k == 0:
                drop = {0}  # the first runs of the series: the change point out of them
            kept = [cp for j, cp in enumerate(kept) if j not in drop]
            changed = True
            break
    return kept


def _goes_back(logs: FloatArray, edges: list[int], k: int) -> bool:
    """Does the series return after the short level k (a blip), rather than step on?"""
    level = [float(np.mean(logs[edges[j] : edges[j + 1]])) for j in (k - 1, k, k + 1)]
    return (level[1] - level[0]) * (level[2] - level[1]) < 0


def change_points(
    figures: Sequence[RunFigure], max_pvalue: float = MAX_PVALUE, confidence: float = 0.95
) -> list[ChangePoint]:
    """Confirmed change points, and an unconfirmed one whose new level is the series' last
    runs and still shorter than ``1 + CONFIRM_RUNS`` (``confirmed=False``)."""
    values = [f.value for f in figures]
    found = confirm(values, detect(values, max_pvalue))
    edges = [0, *(i for i, _ in found), len(values)]
    out = []
    for k, (index, pvalue) in enumerate(found):
        before, after = values[edges[k] : index], values[index : edges[k + 2]]
        step, low, high = _step(before, after, confidence)
        out.append(
            ChangePoint(
                index=index,
                run_id=figures[index].run_id,
                created_at=figures[index].created_at,
                before=math.exp(float(np.mean(np.log(before)))),
                after=math.exp(float(np.mean(np.log(after)))),
                step_pct=step,
                step_low=low,
                step_high=high,
                pvalue=pvalue,
                confirmed=len(after) >= 1 + CONFIRM_RUNS,
                runs_after=len(after),
            )
        )
    return out
