"""Regression decision: is the candidate slower than the reference beyond a margin?

Slowdown is ``(candidate - reference) / reference * 100``, estimated like every ratio here: on
the log scale, as the mean per-block log ratio ``log C_b - log R_b`` when the rounds come in
blocks (Welch on the logs otherwise), reported as ``(exp(.) - 1) * 100`` with the interval
transformed the same way (geometric-mean ratio).

Verdict against ``margin_pct``:

- PASS when the interval's upper bound is below the margin (slower by less than the margin,
  with confidence);
- FAIL when the lower bound is above the margin;
- INCONCLUSIVE otherwise, including when n is too small for an interval.

Honesty across looks and decisions. A gate decides several (size, metric) pairs and its
overall verdict is the worst of them; a live gate that gets INCONCLUSIVE adds blocks and looks
again, up to ``max_looks`` times. Every extra decision and every extra look is another chance
for one interval to miss, and the overall verdict inherits any miss (measured: with two
metrics at the margin and intervals adjusted for looks only, about 3.6 % wrong FAIL against a
promised 2.5 %). So the error budget ``alpha = 1 - confidence`` is spent by Bonferroni over the
whole family: each interval is two-sided at level ``1 - alpha / (max_looks x decisions)``. By the
union bound, the chance that *any* interval of any decision at any look misses its true
slowdown is at most alpha, so the overall verdict is a wrong FAIL (FAIL while every true
slowdown is <= the margin) at most alpha / 2 of the time, and a wrong PASS (PASS while some
true slowdown is >= the margin) at most alpha / 2 too. This is conservative (looks and metrics
are positively correlated), simple, and needs no assumption about how many blocks each look
adds. ``max_looks`` and the decisions must be fixed before the first look.

What it does assume: that each interval has its nominal coverage. The union bound adds up the
intervals' misses; it cannot repair an interval that misses more than it says. The paired
t-interval keeps its level only when per-block log ratios are close to normal; on whole-second
data at 3-6 blocks it did not (the plain t wrongly FAILed 3.96 % of ``lab-regression`` gates,
issue 37), so coarse data get the resolution-aware interval of ``abtest.stats.resolution``. Measured
(``tests/unit/stats/test_regress_calibration.py``, ``test_coarse_calibration.py``): wrong
FAIL and wrong PASS <= 2.5 % on normal, whole-second, tick-aligned (exact, and with 20 ms of
jitter) and relist-shaped data at looks of 3, 4, 6 and 3/6/9 blocks; heavier tails or data
coarser still are not covered by it, nor whole-second-ish rounds that all sit within
milliseconds of one tick (they show no grid: at 2-3.5 % work noise a candidate at the margin
wrongly PASSed 12-23 % of ``lab-regression`` gates).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import scipy.stats as sps

from abtest.config.margin import check_margin
from abtest.errors import UserError
from abtest.stats.contrast import estimate_contrast
from abtest.stats.frame import Pair, check_rounds, rows_for
from abtest.stats.intervals import FloatArray, check_confidence, pct_change_from_log_ratio
from abtest.stats.power import POWER, detectable

Verdict = Literal["PASS", "INCONCLUSIVE", "FAIL"]
_SEVERITY: dict[Verdict, int] = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}


@dataclass(frozen=True)
class Decision:
    """The verdict for one (size, metric) and the numbers behind it."""

    reference: str
    candidate: str
    size: int
    metric: str
    margin_pct: float
    slowdown_pct: float  # geometric-mean based, > 0 means the candidate is slower
    slowdown_ci: tuple[float, float] | None
    verdict: Verdict
    confidence: float  # the family level asked for, across all looks and decisions
    look_confidence: float  # the level this interval uses (Bonferroni over the family)
    look: int
    max_looks: int
    n_reference: int
    n_candidate: int
    n_pairs: int
    reference_mean: float  # arithmetic, over every round of the arm (labelled "all rounds")
    candidate_mean: float
    p_value: float | None  # "no change" test at this look, for information
    method: str
    note: str
    decisions: int = 1  # (size, metric) decisions in the family this interval is adjusted for
    # Geometric means over the rounds the interval used (complete blocks when paired, per-block
    # means first): candidate_gm / reference_gm - 1 is slowdown_pct exactly, so the figures
    # printed beside the interval agree with it (issue 26).
    reference_gm: float = float("nan")
    candidate_gm: float = float("nan")
    # The look's sensitivity: the change (either way) a paired interval at look_confidence
    # would have shown with 80 % power, from its own noise. Not a bound on the slowdown (the
    # interval is); NaN when unpaired or without an interval.
    mde_pct: float = float("nan")
    # INCONCLUSIVE only: the complete blocks that would settle it (the interval clearing the
    # margin) if the slowdown and the per-block noise stayed as measured, at this look's level;
    # None when decided, unpaired, without an interval, or with the estimate on the margin
    # (no number of blocks settles that: only a different margin would).
    settle_blocks: int | None = None


def look_confidence(confidence: float, max_looks: int, decisions: int = 1) -> float:
    """Interval level under Bonferroni spending over the family of looks x decisions:
    ``1 - alpha / (max_looks * decisions)``."""
    check_confidence(confidence)
    if max_looks < 1:
        raise UserError(f"max_looks must be >= 1, got {max_looks}", "regression decision")
    if decisions < 1:
        raise UserError(f"decisions must be >= 1, got {decisions}", "regression decision")
    return 1.0 - (1.0 - confidence) / (max_looks * decisions)


def classify(lo: FloatArray, hi: FloatArray, margin_pct: float) -> FloatArray:
    """Verdict codes elementwise: 0 PASS, 1 INCONCLUSIVE, 2 FAIL (bounds in percent)."""
    codes = np.ones_like(lo, dtype=np.float64)
    codes = np.where(hi < margin_pct, 0.0, codes)
    return np.where(lo > margin_pct, 2.0, codes)


def verdict_of(ci: tuple[float, float] | None, margin_pct: float) -> Verdict:
    """PASS / FAIL / INCONCLUSIVE for one slowdown interval (None -> INCONCLUSIVE)."""
    if ci is None:
        return "INCONCLUSIVE"
    code = int(classify(np.array([ci[0]]), np.array([ci[1]]), margin_pct)[0])
    verdicts: tuple[Verdict, ...] = ("PASS", "INCONCLUSIVE", "FAIL")
    return verdicts[code]


def regression_decision(
    rounds: pd.DataFrame,
    *,
    reference: str,
    candidate: str,
    size: int,
    metric: str,
    margin_pct: float,
    confidence: float = 0.95,
    look: int = 1,
    max_looks: int = 1,
    decisions: int = 1,
    history: pd.DataFrame | None = None,
) -> Decision:
    """Slowdown of ``candidate`` vs ``reference`` at one size with its verdict.

    ``history``: the node's earlier rounds, if the caller has them, for the metric's
    resolution (``abtest.stats.contrast.metric_step``).

    ``look`` is this look's number (1-based) out of at most ``max_looks`` planned looks, and
    ``decisions`` the number of (size, metric) decisions the overall verdict combines; the
    interval level is ``1 - (1 - confidence) / (max_looks * decisions)`` (module docstring).
    """
    level = look_confidence(confidence, max_looks, decisions)
    if not 1 <= look <= max_looks:
        raise UserError(f"look {look} is outside 1..{max_looks}", "regression decision")
    check_margin(margin_pct, "regression decision")
    # The contrast {candidate: +1, reference: -1} would collapse to one arm: the same refusal
    # as every comparison's.
    Pair(reference, candidate, size, metric, level).check_two_arms()
    check_rounds(rounds, metric)
    ref = rows_for(rounds, reference, size)[metric].to_numpy(dtype=np.float64)
    cand = rows_for(rounds, candidate, size)[metric].to_numpy(dtype=np.float64)
    for arm, values in ((reference, ref), (candidate, cand)):
        if values.size == 0:
            raise UserError(
                f"no rounds for arm {arm!r} at size {size}",
                f"{metric} at size {size}",
                "measure both sides at every size you decide on",
            )
    log_ratio = estimate_contrast(
        rounds,
        coefficients={candidate: 1.0, reference: -1.0},
        size=size,
        metric=metric,
        confidence=level,
        scale="log",
        history=history,
    )
    matched = dict(log_ratio.arm_means)  # log-scale means over the interval's rounds
    ci = None
    if log_ratio.ci is not None:
        ci = (
            pct_change_from_log_ratio(log_ratio.ci[0]),
            pct_change_from_log_ratio(log_ratio.ci[1]),
        )
    return Decision(
        reference=reference,
        candidate=candidate,
        size=int(size),
        metric=metric,
        margin_pct=margin_pct,
        slowdown_pct=pct_change_from_log_ratio(log_ratio.estimate),
        slowdown_ci=ci,
        verdict=verdict_of(ci, margin_pct),
        confidence=confidence,
        look_confidence=level,
        look=look,
        max_looks=max_looks,
        n_reference=int(ref.size),
        n_candidate=int(cand.size),
        n_pairs=log_ratio.n_blocks,
        reference_mean=float(ref.mean()),
        candidate_mean=float(cand.mean()),
        p_value=log_ratio.p_value,
        method=log_ratio.method,
        note=log_ratio.note,
        decisions=decisions,
        reference_gm=float(np.exp(matched[reference])),
        candidate_gm=float(np.exp(matched[candidate])),
        mde_pct=_sensitivity(log_ratio.ci, log_ratio.n_blocks, log_ratio.method, level),
        settle_blocks=settle_blocks(
            log_ratio.ci, log_ratio.estimate, log_ratio.n_blocks, margin_pct, level
        )
        if log_ratio.method == "paired" and verdict_of(ci, margin_pct) == "INCONCLUSIVE"
        else None,
    )


MOST_BLOCKS = 10_000


def settle_blocks(
    ci: tuple[float, float] | None, estimate: float, n: int, margin_pct: float, level: float
) -> int | None:
    """Fewest complete blocks whose interval at ``level`` (log scale, ``ci`` and ``estimate``)
    clears the margin, if the estimate and the per-block SD stayed as measured."""
    if ci is None or n < 2:
        return None
    gap = abs(math.log1p(margin_pct / 100.0) - estimate)
    sd = (ci[1] - ci[0]) / 2.0 / float(sps.t.ppf(0.5 + level / 2.0, n - 1)) * math.sqrt(n)
    if gap < 1e-12 or sd == 0.0:
        return None
    q = 0.5 + level / 2.0

    def clears(k: int) -> bool:
        return float(sps.t.ppf(q, k - 1)) * sd / math.sqrt(k) < gap

    # The half-width falls as k grows (t's quantile and 1 / sqrt(k) both do): bisect for the
    # first k that clears, ~14 quantiles where a scan took up to 10 000 (2 s per decision).
    if n >= MOST_BLOCKS:
        return None
    lo, hi = n, MOST_BLOCKS  # invariant: lo does not clear (or is n), hi is the answer if any
    if not clears(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if clears(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _sensitivity(ci: tuple[float, float] | None, n: int, method: str, level: float) -> float:
    """The MDE of a paired log-ratio interval at ``level``, from that interval's own width."""
    if method != "paired" or ci is None or n < 2:
        return float("nan")
    se = (ci[1] - ci[0]) / 2.0 / float(sps.t.ppf(0.5 + level / 2.0, n - 1))
    return detectable(se * math.sqrt(n), n, level, POWER).mde_pct


def overall_verdict(decisions: Iterable[Decision]) -> Verdict:
    """The worst verdict: FAIL > INCONCLUSIVE > PASS."""
    verdicts = [d.verdict for d in decisions]
    if not verdicts:
        raise UserError(
            "no decisions to combine", "regression decision", "decide at least one size"
        )
    return max(verdicts, key=lambda v: _SEVERITY[v])
