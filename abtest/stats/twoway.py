"""The reference article's two-way table: a pod-spec factor (the runtime) x kubelet settings.

The article's table has one row per start path (runc, Cube, Kata, ...) and, per batch size, the
batch ready time "without" and "with" the kubelet optimisations. Here the rows are the two levels
of one pod-spec factor (its off and on value, e.g. runc and crun), "with" is the arm with every
kubelet factor of the design on and "without" the arm with none, at the same runtime level:

    level off, without: {}            level off, with: {k1..kn}
    level on,  without: {p}           level on,  with: {p, k1..kn}

Three things are estimated per size, all paired by block like every other comparison (see
``compare``): each cell's mean with its interval (Cox's log-scale interval for a mean,
transformed back: round times are skewed); the settings' saving at each runtime level
(``compare_pair`` of "with" vs "without", Holm across the two levels of one size); and the
interaction, i.e. whether the saving depends on the runtime. On the log scale the settings'
effect at a level is ``log(with / without)``; the interaction is the difference of those two
effects, a ratio of ratios ``(on_with / on_without) / (off_with / off_without)``, estimated as
one four-arm contrast per block, so its interval is exactly as honest as a two-arm one (fewer
than 2 complete blocks: no interval, the note says why). Beside it, the difference of the two
savings in seconds on the raw scale. A ratio of ratios of 1 means the settings cut the same
fraction of the time on both runtimes; below 1, they cut more on the "on" level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from abtest.errors import NO_VARIATION, TOO_SMALL, UserError
from abtest.stats.compare import Comparison, compare_pair
from abtest.stats.contrast import ContrastEstimate, Scale, estimate_contrast
from abtest.stats.frame import ARM, BLOCK, SIZE, Pair, check_rounds, has_blocks
from abtest.stats.intervals import (
    check_confidence,
    holm,
    lognormal_mean_interval,
    no_variation,
    pct_reduction_from_log_ratio,
    ratio_and_pct_ci,
)

WITHOUT, WITH = False, True


@dataclass(frozen=True)
class TwoWayCell:
    """One arm of the table at one size: the mean of the metric with its interval."""

    level: str  # the pod-spec factor's value in this row, e.g. "runc"
    settings_on: bool  # False: "without" (no kubelet factor on), True: "with" (all on)
    arm: str
    size: int
    n: int
    mean: float
    ci: tuple[float, float] | None
    note: str  # why ci is None ("" when it is not)


@dataclass(frozen=True)
class TwoWayInteraction:
    """Does the settings' saving depend on the runtime? At one size.

    ``ratio_of_ratios = (on_with / on_without) / (off_with / off_without)`` on geometric means;
    ``pct_difference = (1 - ratio_of_ratios) * 100``: how much more (> 0) or less (< 0) the
    settings cut, in percent, at the "on" level than at the "off" level. ``savings_diff_s`` is
    the saving at the "on" level minus the saving at the "off" level, in seconds.
    """

    size: int
    ratio_of_ratios: float
    ratio_ci: tuple[float, float] | None
    pct_difference: float
    pct_ci: tuple[float, float] | None
    p_value: float | None  # tests "the same ratio at both levels" (log scale)
    savings_diff_s: float
    savings_diff_ci: tuple[float, float] | None
    method: str  # "paired", "welch" or "none"
    n_blocks: int
    note: str


@dataclass(frozen=True)
class TwoWay:
    """The whole two-way view of one metric: cells, per-level savings, interactions."""

    pod_factor: str
    levels: tuple[str, str]  # (off value, on value): the table's rows, in this order
    settings: tuple[str, ...]  # the kubelet factors that are all on in "with"
    arms: tuple[tuple[str, bool, str], ...]  # (level, settings_on, arm name), 4 entries
    metric: str
    confidence: float
    sizes: tuple[int, ...]
    cells: tuple[TwoWayCell, ...]
    savings: tuple[tuple[str, Comparison], ...]  # (level, with vs without), Holm per size
    interactions: tuple[TwoWayInteraction, ...]
    note: str = ""

    def cell(self, level: str, settings_on: bool, size: int) -> TwoWayCell | None:
        return next(
            (
                c
                for c in self.cells
                if (c.level, c.settings_on, c.size) == (level, settings_on, size)
            ),
            None,
        )

    def saving(self, level: str, size: int) -> Comparison | None:
        return next((c for lv, c in self.savings if lv == level and c.size == size), None)

    def interaction(self, size: int) -> TwoWayInteraction | None:
        return next((i for i in self.interactions if i.size == size), None)


def two_way_arms(
    arms: Mapping[str, frozenset[str]], *, pod_factor: str, settings: Sequence[str]
) -> dict[tuple[bool, bool], str]:
    """The four arms of the table, keyed (pod factor on, settings on); UserError naming the
    ones the design does not have."""
    if not settings:
        raise UserError(
            "a two-way table needs at least one kubelet factor",
            f"pod-spec factor {pod_factor}",
            "cross the pod-spec factor with kubelet settings",
        )
    if pod_factor in settings:
        raise UserError(
            f"factor {pod_factor} is both the pod-spec factor and a setting",
            "two-way table",
            "name it once",
        )
    by_set = {on: name for name, on in arms.items()}
    wanted = {
        (p, s): frozenset(([pod_factor] if p else []) + (list(settings) if s else []))
        for p in (False, True)
        for s in (False, True)
    }
    missing = [", ".join(sorted(on)) or "(none)" for on in wanted.values() if on not in by_set]
    if missing:
        raise UserError(
            f"the design has no arm with exactly these factors on: {'; '.join(missing)}",
            f"two-way table of {pod_factor} x {', '.join(settings)}",
            "run a factorial design over the pod-spec factor and the settings",
        )
    return {key: by_set[on] for key, on in wanted.items()}


def two_way(
    rounds: pd.DataFrame,
    *,
    arms: Mapping[str, frozenset[str]],
    pod_factor: str,
    settings: Sequence[str],
    levels: tuple[str, str],
    metric: str,
    confidence: float = 0.95,
) -> TwoWay:
    """The two-way table of ``metric`` over every size where at least one of its arms ran."""
    check_confidence(confidence)
    check_rounds(rounds, metric)
    if levels[0] == levels[1]:
        raise UserError(
            f"the two levels of {pod_factor} are both {levels[0]!r}",
            "two-way table",
            "a pod-spec factor's on and off values must differ",
        )
    four = two_way_arms(arms, pod_factor=pod_factor, settings=settings)
    label = {False: levels[0], True: levels[1]}
    present = rounds[rounds[ARM].isin(list(four.values()))]
    sizes = tuple(sorted(int(s) for s in pd.unique(present[SIZE])))
    cells: list[TwoWayCell] = []
    savings: list[tuple[str, Comparison]] = []
    interactions: list[TwoWayInteraction] = []
    for size in sizes:
        ran = set(present.loc[present[SIZE] == size, ARM])
        for (pod_on, settings_on), arm in four.items():
            if arm in ran:
                cells.append(
                    _cell(rounds, arm, size, metric, confidence, label[pod_on], settings_on)
                )
        table: list[tuple[str, Comparison]] = []
        for pod_on in (False, True):
            without, with_ = four[(pod_on, WITHOUT)], four[(pod_on, WITH)]
            if without in ran and with_ in ran:
                c = compare_pair(rounds, Pair(without, with_, size, metric, confidence))
                table.append((label[pod_on], c))
        # Holm across the levels of one size: "the settings help at this runtime" is asked
        # once per level, and the family is this size's row of per-level savings.
        adjusted = holm([c.p_value for _, c in table])
        savings.extend(
            (lv, dataclasses.replace(c, p_adjusted=p))
            for (lv, c), p in zip(table, adjusted, strict=True)
        )
        if set(four.values()) <= ran:
            interactions.append(_interaction(rounds, four, size, metric, confidence))
    note = ""
    if len(settings) > 1:
        note = f"'with' = all of {', '.join(settings)} on; 'without' = none of them"
    return TwoWay(
        pod_factor=pod_factor,
        levels=levels,
        settings=tuple(settings),
        arms=tuple((label[p], s, arm) for (p, s), arm in four.items()),
        metric=metric,
        confidence=confidence,
        sizes=sizes,
        cells=tuple(cells),
        savings=tuple(savings),
        interactions=tuple(interactions),
        note=note,
    )


def _cell(
    rounds: pd.DataFrame,
    arm: str,
    size: int,
    metric: str,
    confidence: float,
    level: str,
    settings_on: bool,
) -> TwoWayCell:
    """The cell's mean with Cox's log-scale interval (``lognormal_mean_interval``).

    A t-interval on raw seconds covered 90.6 % under heavy noise at 5 blocks (round times are
    skewed); the log-scale interval transformed back holds (docs/statistics.md). Per block
    first when rounds carry blocks (as ``estimate_contrast`` pairs them): the block is the unit.
    """
    rows = rounds.loc[(rounds[ARM] == arm) & (rounds[SIZE] == size)]
    values = rows[metric].to_numpy(dtype=np.float64)
    units = rows.groupby(BLOCK)[metric].mean().to_numpy() if has_blocks(rows) else values
    ci, note = None, f"{TOO_SMALL} (fewer than 2 {'blocks' if has_blocks(rows) else 'rounds'})"
    if units.size >= 2:
        logs = np.log(units.astype(np.float64))
        if bool(no_variation(logs.std(ddof=1), max(1.0, float(np.abs(logs).max())))):
            note = NO_VARIATION
        else:
            got = lognormal_mean_interval(logs, confidence)
            ci, note = (float(np.exp(got.lo)), float(np.exp(got.hi))), ""
    return TwoWayCell(
        level=level,
        settings_on=settings_on,
        arm=arm,
        size=size,
        n=int(values.size),
        mean=float(units.mean()),  # the mean of the units the interval is made of
        ci=ci,
        note=note,
    )


def _interaction(
    rounds: pd.DataFrame,
    four: dict[tuple[bool, bool], str],
    size: int,
    metric: str,
    confidence: float,
) -> TwoWayInteraction:
    on_with, on_without = four[(True, WITH)], four[(True, WITHOUT)]
    off_with, off_without = four[(False, WITH)], four[(False, WITHOUT)]

    def difference_of_differences(a: str, b: str, c: str, d: str, scale: Scale) -> ContrastEstimate:
        """(a - b) - (c - d) of the arms' means on ``scale`` (the arms in this order)."""
        coefficients = {a: 1.0, b: -1.0, c: -1.0, d: 1.0}
        return estimate_contrast(
            rounds,
            coefficients=coefficients,
            size=size,
            metric=metric,
            confidence=confidence,
            scale=scale,
        )

    # log(on_with / on_without) - log(off_with / off_without): the log ratio of ratios
    log_ror = difference_of_differences(on_with, on_without, off_with, off_without, "log")
    # saving(on) - saving(off) = (on_without - on_with) - (off_without - off_with)
    seconds = difference_of_differences(on_without, on_with, off_without, off_with, "raw")
    ratio_ci, pct_ci = ratio_and_pct_ci(log_ror.ci)
    notes = [n for n in (log_ror.note, seconds.note if seconds.ci is None else "") if n]
    return TwoWayInteraction(
        size=size,
        ratio_of_ratios=float(np.exp(log_ror.estimate)),
        ratio_ci=ratio_ci,
        pct_difference=pct_reduction_from_log_ratio(log_ror.estimate),
        pct_ci=pct_ci,
        p_value=log_ror.p_value,
        savings_diff_s=seconds.estimate,
        savings_diff_ci=seconds.ci,
        method=log_ror.method,
        n_blocks=log_ror.n_blocks,
        note="; ".join(dict.fromkeys(notes)),
    )
