"""Per size, each arm's mean of a metric and its percent change vs the baseline's mean: the
quick summary a sweep prints when it ends (no intervals; the report has them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class ArmMean:
    size: int
    arm: str
    rounds: int
    mean_s: float
    change_pct: float | None  # (arm - baseline) / baseline x 100; None for the baseline itself

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def arm_means(
    rounds: pd.DataFrame, *, baseline: str = "baseline", metric: str = "batch_ready_s"
) -> list[ArmMean]:
    """Accepted, non-warm-up rounds only; sizes ascending, arms in name order within a size.
    A rejected round has no time, so a size whose rounds were all rejected has no row."""
    if rounds.empty:
        return []
    ok = rounds[(rounds["accepted"] == 1) & (rounds["warmup"] == 0)]
    out: list[ArmMean] = []
    for _, by_size in ok.groupby("size"):
        size = int(by_size["size"].iloc[0])
        means = by_size.groupby("arm")[metric].agg(["mean", "count"])
        base = means["mean"].get(baseline)
        for arm, row in means.iterrows():
            mean = float(row["mean"])
            change = None if base is None or arm == baseline else (mean - base) / base * 100
            out.append(ArmMean(size, str(arm), int(row["count"]), mean, change))
    return out
