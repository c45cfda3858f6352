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

Sequential honesty. A live gate that gets INCONCLUSIVE adds blocks and looks again, up to
``max_looks`` times. Looking repeatedly at a growing sample and stopping at the first decisive
verdict inflates the error rate if every look uses the nominal level. So the error budget
``alpha = 1 - confidence`` is spent by Bonferroni: each look uses a two-sided interval at level
``1 - alpha / max_looks``. By the union bound, the probability that *any* look's interval misses
the true slowdown is at most alpha, so across all looks a wrong FAIL (true slowdown <= margin)
and a wrong PASS (true slowdown >= margin) each happen at most alpha / 2 of the time. This is
conservative (looks are positively correlated), simple, and needs no assumption about how many
blocks each look adds. ``max_looks`` must be fixed before the first look.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from abtest.errors import UserError
from abtest.stats.contrast import estimate_contrast
from abtest.stats.frame import check_rounds, rows_for
from abtest.stats.intervals import FloatArray, check_confidence, pct_change_from_log_ratio

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
    confidence: float  # the family level asked for, across all looks
    look_confidence: float  # the level this look's interval uses (Bonferroni)
    look: int
    max_looks: int
    n_reference: int
    n_candidate: int
    n_pairs: int
    reference_mean: float
    candidate_mean: float
    p_value: float | None  # "no change" test at this look, for information
    method: str
    note: str


def look_confidence(confidence: float, max_looks: int) -> float:
    """Per-look interval level under Bonferroni alpha spending: ``1 - alpha / max_looks``."""
    check_confidence(confidence)
    if max_looks < 1:
        raise UserError(f"max_looks must be >= 1, got {max_looks}", "regression decision")
    return 1.0 - (1.0 - confidence) / max_looks


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
) -> Decision:
    """Slowdown of ``candidate`` vs ``reference`` at one size with its verdict.

    ``look`` is this look's number (1-based) out of at most ``max_looks`` planned looks; the
    interval level is ``1 - (1 - confidence) / max_looks`` at every look (see module docstring).
    """
    level = look_confidence(confidence, max_looks)
    if not 1 <= look <= max_looks:
        raise UserError(f"look {look} is outside 1..{max_looks}", "regression decision")
    if not margin_pct > -100.0:
        raise UserError(f"margin {margin_pct} % is not above -100 %", "regression decision")
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
    )
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
    )


def overall_verdict(decisions: Iterable[Decision]) -> Verdict:
    """The worst verdict: FAIL > INCONCLUSIVE > PASS."""
    verdicts = [d.verdict for d in decisions]
    if not verdicts:
        raise UserError(
            "no decisions to combine", "regression decision", "decide at least one size"
        )
    return max(verdicts, key=lambda v: _SEVERITY[v])
