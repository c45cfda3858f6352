"""Where the time went: for each arm vs the baseline, the change of each pod phase and of each
kubelet stage, with intervals paired by block, ranked by their share of the batch saving.

A saving in batch ready time says *that* an arm is faster, not *where*. Every round keeps two
kinds of evidence that do: each pod's milestones (sent, scheduled, ready to start containers,
containers ready, Ready), and the kubelet's own stage histograms (``sum`` and ``count`` deltas
over the round). Per round they are reduced to one number per item:

- a pod phase: the mean over the round's pods of the time from one milestone to the next
  (``PHASES``; the chain telescopes, so the four phase means add up to the mean per-pod latency,
  which is given beside them as ``latency``);
- a kubelet stage: the histogram's mean per observation over the round (delta_sum/delta_count).

Each item is then compared exactly like batch ready time: the saving ``B - T`` in seconds on the
raw scale, a t-interval paired by block (Welch when blocks do not pair, none with fewer than 2
rounds or pairs: the note says why). Its share is ``saving / batch saving x 100``, given only when
the batch saving's own interval excludes 0 (a share of a saving that may be nothing is noise over
noise). Shares do not add up to 100 %: pods start in parallel, so the mean pod's phases are not
the batch's critical path, and stages overlap (a pod start contains its sandbox) and are counted
per observation, not per pod. A share says which mechanism moved with the saving and how much.
Intervals are per row, not adjusted across the rows: among ~20 null rows, one may exclude 0 by
chance.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pandas as pd

from abtest.stats.compare import Comparison, compare_pair_with_saving
from abtest.stats.contrast import estimate_contrast
from abtest.stats.frame import ARM, BLOCK, SIZE, Pair, arm_order, check_baseline, sizes_of
from abtest.stats.intervals import check_confidence, holm

ItemKind = Literal["phase", "stage"]
ROUND = "round_id"
KIND = "kind"
ITEM = "item"
VALUE = "value"
LATENCY = "latency"

# From one pod milestone to the next (as the batch engine's summary defines them): scheduling
# (create sent -> PodScheduled), sandbox and network (-> PodReadyToStartContainers), containers
# (-> ContainersReady), and the last step to Ready. They chain from sent to Ready.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("schedule", "sent_s", "scheduled_s"),
    ("sandbox", "scheduled_s", "ready_to_start_s"),
    ("containers", "ready_to_start_s", "containers_ready_s"),
    ("ready", "containers_ready_s", "ready_s"),
)


@dataclass(frozen=True)
class ItemChange:
    """One phase or stage of one arm vs the baseline at one size (seconds)."""

    kind: ItemKind
    item: str  # phase name, or ``metric{labels}`` of a kubelet histogram
    baseline_mean: float  # the means the saving is made of (complete blocks when paired)
    arm_mean: float
    saving_s: float  # baseline - arm: > 0 when the arm spends less time here
    ci: tuple[float, float] | None
    p_value: float | None
    method: str  # "paired", "welch" or "none"
    n_blocks: int
    note: str  # why ci is None, or what was left out ("" when nothing)
    share_pct: float | None  # saving / batch saving x 100; None when the batch saving is unclear
    rank: int  # 1 = first within its kind (by share, or by size of the change when no share)


@dataclass(frozen=True)
class TimeWent:
    """Where the time of one arm's saving went, at one size."""

    arm: str
    baseline: str
    size: int
    batch: Comparison  # the saving the shares are of
    clear: bool  # the batch saving's interval excludes 0 (shares are given)
    phases: tuple[ItemChange, ...]  # ranked; the per-pod ``latency`` first
    stages: tuple[ItemChange, ...]  # ranked
    # the phases' savings add up to the latency's (False when some pod lacks a milestone, or a
    # phase has fewer complete blocks than the latency)
    phases_add_up: bool = True
    # p of the batch saving in seconds (the scale of its interval and of every row here);
    # ``batch.p_value`` tests the ratio on the log scale, as the savings tables do
    batch_p_seconds: float | None = None
    # the phases and stages whose change holds with Holm over every item of this arm and size,
    # most certain first, each with its adjusted p (see ``resolved_items``)
    resolved: tuple[tuple[ItemChange, float], ...] = ()

    def top_stages(self, n: int) -> tuple[ItemChange, ...]:
        return self.stages[:n]

    @property
    def n_items(self) -> int:
        return len(self.phases) + len(self.stages)


def resolved_items(
    items: tuple[ItemChange, ...], alpha: float
) -> tuple[tuple[ItemChange, float], ...]:
    """The items whose change holds with Holm over all of them, most certain first, each with
    its adjusted p. The per-row intervals are not adjusted (among ~20 null rows one may exclude
    0 by chance), so naming a moved mechanism as a result needs the family's correction."""
    adjusted = holm([c.p_value for c in items])
    held = [(c, p) for c, p in zip(items, adjusted, strict=True) if p is not None and p < alpha]
    return tuple(sorted(held, key=lambda pair: pair[1]))


def pod_phases(pods: pd.DataFrame) -> pd.DataFrame:
    """Per round, the mean over its pods of each phase and of the latency (``round_id``,
    ``kind``, ``item``, ``value``); a pod without both milestones of a phase is left out of it."""
    rows: list[pd.DataFrame] = []
    spans = [("latency", "sent_s", "ready_s"), *PHASES]
    for name, start, end in spans:
        if start not in pods.columns or end not in pods.columns:
            continue
        span = pd.to_numeric(pods[end], errors="coerce") - pd.to_numeric(
            pods[start], errors="coerce"
        )
        frame = pd.DataFrame({ROUND: pods[ROUND].to_numpy(), VALUE: span.to_numpy()}).dropna()
        if frame.empty:
            continue
        means = frame.groupby(ROUND, sort=True)[VALUE].mean().reset_index()
        means[KIND] = "phase"
        means[ITEM] = name
        rows.append(means)
    return _items(rows)


def stage_means(deltas: pd.DataFrame) -> pd.DataFrame:
    """Per round, each kubelet histogram's mean per observation (``delta_sum / delta_count``),
    one item per (metric, labels); counters (no sum) and empty deltas are left out."""
    if deltas.empty:
        return _items([])
    total = pd.to_numeric(deltas["delta_sum"], errors="coerce")
    count = pd.to_numeric(deltas["delta_count"], errors="coerce")
    with np.errstate(divide="ignore", invalid="ignore"):
        per_obs = (total / count).where(count > 0)
    labels = deltas["labels"].fillna("").astype(str)
    names = deltas["metric"].astype(str) + labels.map(lambda s: f"{{{s}}}" if s else "")
    frame = pd.DataFrame(
        {ROUND: deltas[ROUND].to_numpy(), ITEM: names.to_numpy(), VALUE: per_obs.to_numpy()}
    ).dropna()
    frame[KIND] = "stage"
    return _items([frame])


def _items(parts: list[pd.DataFrame]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({ROUND: [], KIND: [], ITEM: [], VALUE: []})
    return pd.concat(parts, ignore_index=True)[[ROUND, KIND, ITEM, VALUE]]


def where_time_went(
    rounds: pd.DataFrame,
    items: pd.DataFrame,
    *,
    baseline: str,
    metric: str = "batch_ready_s",
    confidence: float = 0.95,
) -> tuple[TimeWent, ...]:
    """Every arm vs ``baseline`` at every size both ran, over the analysed ``rounds``
    (``round_id``, ``arm``, ``size``, optional ``block``, ``metric``) and their ``items``
    (``pod_phases`` and ``stage_means`` concatenated)."""
    check_confidence(confidence)
    check_baseline(rounds, baseline, "where the time went")
    keys = [c for c in (ROUND, ARM, SIZE, BLOCK) if c in rounds.columns]
    joined = items.merge(rounds[keys], on=ROUND, how="inner")
    by_item = {
        (str(kind), str(item)): group.rename(columns={VALUE: "v"})
        for (kind, item), group in joined.groupby([KIND, ITEM], sort=True)
    }
    out: list[TimeWent] = []
    for size in sizes_of(rounds, baseline):
        at_size = rounds[rounds[SIZE] == size]
        for arm in arm_order(at_size):
            if arm == baseline:
                continue
            batch, seconds = compare_pair_with_saving(
                rounds, Pair(baseline, arm, size, metric, confidence)
            )
            clear = batch.savings_ci is not None and (
                batch.savings_ci[0] > 0 or batch.savings_ci[1] < 0
            )
            changes = [
                change
                for (kind, item), frame in by_item.items()
                if (change := _change(frame, kind, item, baseline, arm, size, confidence))
                is not None
            ]
            ranked = _ranked(changes, batch.savings_s if clear else None)
            phases = tuple(c for c in ranked if c.kind == "phase")
            stages = tuple(c for c in ranked if c.kind == "stage")
            out.append(
                TimeWent(
                    arm=arm,
                    baseline=baseline,
                    size=size,
                    batch=batch,
                    clear=clear,
                    phases=phases,
                    stages=stages,
                    phases_add_up=_add_up(phases),
                    batch_p_seconds=seconds.p_value,
                    resolved=resolved_items((*phases, *stages), 1.0 - confidence),
                )
            )
    return tuple(out)


def _change(
    frame: pd.DataFrame,
    kind: str,
    item: str,
    baseline: str,
    arm: str,
    size: int,
    confidence: float,
) -> ItemChange | None:
    """``item``'s saving of ``arm`` vs ``baseline``; None when either arm has no value of it."""
    sides = frame[(frame[SIZE] == size) & frame[ARM].isin([baseline, arm])]
    if not {baseline, arm} <= set(sides[ARM]):
        return None
    estimate = estimate_contrast(
        sides,
        coefficients={baseline: 1.0, arm: -1.0},
        size=size,
        metric="v",
        confidence=confidence,
        scale="raw",
    )
    means = dict(estimate.arm_means)
    return ItemChange(
        kind="phase" if kind == "phase" else "stage",
        item=item,
        baseline_mean=means[baseline],
        arm_mean=means[arm],
        saving_s=estimate.estimate,
        ci=estimate.ci,
        p_value=estimate.p_value,
        method=estimate.method,
        n_blocks=estimate.n_blocks,
        note=estimate.note,
        share_pct=None,
        rank=0,
    )


def _add_up(phases: tuple[ItemChange, ...]) -> bool:
    """Whether every phase is there and their savings sum to the latency's (to 1 us)."""
    by_name = {c.item: c for c in phases}
    if LATENCY not in by_name or any(name not in by_name for name, _, _ in PHASES):
        return False
    total = sum(by_name[name].saving_s for name, _, _ in PHASES)
    return abs(total - by_name[LATENCY].saving_s) < 1e-6


def _ranked(changes: list[ItemChange], batch_saving: float | None) -> list[ItemChange]:
    """Shares of a clear batch saving, ranked within each kind: by share (the items that moved
    with the saving first), or by the size of the change when the saving is not clear. The
    per-pod latency leads the phases with rank 0: it is their sum, not one of them."""
    out: list[ItemChange] = []
    for kind in ("phase", "stage"):
        mine = [c for c in changes if c.kind == kind]
        if batch_saving is not None and batch_saving != 0.0:
            mine = [replace(c, share_pct=c.saving_s / batch_saving * 100.0) for c in mine]
            mine.sort(key=lambda c: (c.item != LATENCY, -(c.share_pct or 0.0), c.item))
        else:
            mine.sort(key=lambda c: (c.item != LATENCY, -abs(c.saving_s), c.item))
        first = 0 if mine and mine[0].item == LATENCY else 1
        out.extend(replace(c, rank=i + first) for i, c in enumerate(mine))
    return out
