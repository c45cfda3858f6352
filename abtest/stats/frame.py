"""The rounds frame every stats function takes, and its checks.

One row per accepted, non-warm-up round: ``arm`` (str), ``size`` (int, pods per batch),
optional ``block`` (the randomized-block label; rounds of different arms in the same block are
paired) and one column per metric, in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from abtest.errors import UserError

ARM = "arm"
SIZE = "size"
BLOCK = "block"
METRICS: tuple[str, ...] = ("batch_ready_s", "p50_s", "p95_s", "p99_s")


def check_rounds(rounds: pd.DataFrame, metric: str) -> None:
    """Raise UserError unless ``rounds`` has arm/size/metric columns and usable metric values.

    Times must be finite and > 0: the ratio is analysed on the log scale.
    """
    missing = [col for col in (ARM, SIZE, metric) if col not in rounds.columns]
    if missing:
        raise UserError(
            f"rounds have no column {', '.join(missing)}",
            "rounds",
            f"columns present: {', '.join(map(str, rounds.columns))}",
        )
    values = pd.to_numeric(rounds[metric], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values <= 0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise UserError(
            f"{metric} must be a positive number of seconds, got {rounds[metric].iloc[first]!r}",
            f"rounds row {first}",
            "drop or fix rounds without a valid time",
        )


@dataclass(frozen=True)
class Pair:
    """What one comparison compares: ``treatment`` against ``baseline`` at one ``size`` (pods
    per batch) on one ``metric``, its intervals at ``confidence``. Every function of one pair
    of arms takes this, so the five travel together and are checked in one place."""

    baseline: str
    treatment: str
    size: int
    metric: str
    confidence: float = 0.95

    def check_two_arms(self) -> None:
        """Raise UserError when one arm stands on both sides: a contrast of an arm with itself
        collapses to one arm's mean, which is never printed as a saving."""
        if self.baseline == self.treatment:
            raise UserError(
                f"the same arm {self.baseline!r} on both sides of a comparison",
                f"{self.metric} at size {self.size}",
                "compare two different arms",
            )


def has_blocks(rounds: pd.DataFrame) -> bool:
    """True when every round carries a block label (the pairing unit)."""
    return BLOCK in rounds.columns and bool(rounds[BLOCK].notna().all())


def rows_for(rounds: pd.DataFrame, arm: str, size: int) -> pd.DataFrame:
    """The rounds of one arm at one size."""
    return rounds[(rounds[ARM] == arm) & (rounds[SIZE] == size)]


def arm_order(rounds: pd.DataFrame) -> list[str]:
    """Arms in order of first appearance (the order a plan or CSV lists them)."""
    return [str(a) for a in pd.unique(rounds[ARM])]


def check_baseline(rounds: pd.DataFrame, baseline: str, where: str) -> None:
    """Raise UserError unless ``baseline`` has rounds: every comparison is made with it."""
    if not (rounds[ARM] == baseline).any():
        raise UserError(
            f"no rounds for baseline arm {baseline!r}",
            where,
            f"name one of: {', '.join(arm_order(rounds))}",
        )


def sizes_of(rounds: pd.DataFrame, arm: str) -> list[int]:
    """The sizes ``arm`` has rounds at, smallest first."""
    return sorted(int(s) for s in pd.unique(rounds.loc[rounds[ARM] == arm, SIZE]))


def vs_baseline(rounds: pd.DataFrame, baseline: str) -> list[tuple[int, list[str]]]:
    """The tables of a comparison with ``baseline``: each size the baseline has rounds at, with
    the other arms that have rounds there, in order of first appearance over all ``rounds``."""
    return [
        (
            size,
            [a for a in arm_order(rounds) if a != baseline and not rows_for(rounds, a, size).empty],
        )
        for size in sizes_of(rounds, baseline)
    ]


def finite(value: object) -> object:
    """A result value as JSON takes it: a number that is not finite is None (no NaN in the
    output), an interval or other tuple a list, a numpy scalar a plain number."""
    if isinstance(value, tuple | list):
        return [finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
