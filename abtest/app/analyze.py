"""`abtest analyze`'s use-case: every arm compared with the baseline on rounds from any tool
(our CSV, kube-burner, clusterloader2), as one typed :class:`Analysis`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from abtest.errors import UserError
from abtest.ingest.rounds import RoundsSource, load_rounds
from abtest.ingest.rounds_csv import require_metrics
from abtest.stats import METRICS, Comparison, compare, uncomparable
from abtest.stats.frame import finite
from abtest.stats.intervals import check_confidence
from abtest.stats.power import achieved


@dataclass(frozen=True)
class Analysis:
    """The comparisons (one table per size, metrics in the order asked for within it), the
    smallest change each could detect (80 % power; None where it cannot be said), the
    (arm, size) pairs with no baseline rounds, and the source's notes."""

    baseline: str
    confidence: float
    source: str
    comparisons: tuple[Comparison, ...]
    detectable_pct: tuple[float | None, ...]
    skipped: tuple[tuple[str, int], ...]
    notes: tuple[str, ...]

    def comparison_dicts(self) -> list[dict[str, Any]]:
        return [
            {**c.to_dict(), "mde_pct": finite(mde)}
            for c, mde in zip(self.comparisons, self.detectable_pct, strict=True)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "comparisons": self.comparison_dicts(),
            "skipped": [
                {"arm": arm, "size": size, "reason": "no baseline rounds at this size"}
                for arm, size in self.skipped
            ],
            "notes": list(self.notes),
        }


def analyze(
    source: RoundsSource,
    *,
    baseline: str = "baseline",
    metrics: list[str] | None = None,
    confidence: float = 0.95,
) -> Analysis:
    """UserError for rounds that cannot be compared (no baseline, only the baseline, a metric
    the data does not have, a bad cell in a metric asked for)."""
    check_confidence(confidence)
    loaded = load_rounds(source)
    rounds, where = loaded.frame, loaded.source
    chosen = _chosen_metrics(rounds, metrics, where)
    arms = [str(a) for a in pd.unique(rounds["arm"])]
    if baseline not in arms:
        raise UserError(
            f"no rounds for the baseline arm {baseline!r}",
            f"{where}, column arm",
            f"name the baseline with --baseline; arms in the file: {', '.join(arms)}",
        )
    if arms == [baseline]:
        raise UserError(
            f"only the baseline arm {baseline!r} is in the file: nothing to compare",
            where,
            "add rounds of at least one other arm",
        )
    comparisons = [
        c
        for m in chosen
        for c in compare(rounds, baseline=baseline, metric=m, confidence=confidence)
    ]
    comparisons.sort(key=lambda c: (c.size, chosen.index(c.metric)))
    return Analysis(
        baseline=baseline,
        confidence=confidence,
        source=where,
        comparisons=tuple(comparisons),
        detectable_pct=tuple(
            found.mde_pct if (found := achieved(c)) else None for c in comparisons
        ),
        skipped=tuple(uncomparable(rounds, baseline=baseline)),
        notes=tuple(loaded.notes),
    )


def _chosen_metrics(rounds: pd.DataFrame, asked: list[str] | None, where: str) -> list[str]:
    """--metric names (repeat or comma-separate) checked against the file; default: every metric
    column in it. A bad cell only rejects the file when its metric is analysed."""
    if not asked:
        return require_metrics(rounds, None, where)
    names = [part.strip() for item in asked for part in item.split(",") if part.strip()]
    if not names:
        raise UserError("--metric is empty", "--metric", f"choose from {', '.join(METRICS)}")
    return require_metrics(rounds, names, where)
