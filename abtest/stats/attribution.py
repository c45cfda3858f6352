"""Attribution: which factor of a combination buys how much of its saving.

All savings here are seconds, ``baseline - arm`` (positive = faster), at one size and metric.

- **Alone**: each factor's single arm vs the baseline (a full ``Comparison``; Holm across the
  factors).
- **Marginal in combination**: the combined arm vs the leave-one-out arm without that factor,
  i.e. what the factor still adds when everything else is on (when those arms exist).
- **Non-additivity**: ``combined saving - sum of single savings``; > 0 means the factors help
  each other (synergy), < 0 that they overlap (they fix the same bottleneck). It is a linear
  contrast of arm means, ``sum_f S_f - C - (k - 1) B``, with a t-interval: paired by block (one
  contrast value per complete block) when blocks exist, otherwise the Welch-Satterthwaite
  interval for a contrast of independent means (a delta/Welch approximation). ``method`` says
  which.
- **Share of the combined saving**: the exact Shapley value when every one of the 2^k subsets of
  the factors was measured (a full factorial): the saving averaged over all orders in which the
  factors could be switched on. It is a linear contrast too, so it gets an interval, and the
  shares add up to the combined saving. Without all subsets, the share is an explicitly
  *approximate* split: each factor's average of its alone and marginal savings (whichever
  exist), normalised so the shares add up to the combined saving; no interval.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from abtest.errors import UserError
from abtest.stats.compare import Comparison, compare_pair
from abtest.stats.contrast import estimate_contrast
from abtest.stats.frame import Pair, check_rounds, rows_for
from abtest.stats.intervals import check_confidence, holm

ShareMethod = Literal["shapley", "approximate", "unavailable"]
# (share in seconds, share in % of the combined saving, interval in seconds) per factor
Share = tuple[float | None, float | None, tuple[float, float] | None]
MAX_SHAPLEY_FACTORS = 12  # 2^12 arms; far beyond any real sweep, keeps the sum bounded


@dataclass(frozen=True)
class FactorAttribution:
    """One factor's effects and its share of the combined saving."""

    factor: str
    single_arm: str | None
    leave_one_out_arm: str | None
    alone: Comparison | None  # single arm vs baseline
    marginal: Comparison | None  # combined (treatment) vs leave-one-out (as its baseline)
    share_s: float | None
    share_pct: float | None  # share_s as a percentage of the combined saving
    share_ci: tuple[float, float] | None  # seconds; exact Shapley only


@dataclass(frozen=True)
class NonAdditivity:
    """Combined saving vs the sum of the single savings, seconds."""

    # From the arm means the contrast used (complete blocks when paired, all rounds in a Welch
    # one): combined_saving_s - sum_of_singles_s == excess_s, so the note never contradicts
    # its interval (issue 26: all-rounds means beside a complete-block excess disagreed).
    combined_saving_s: float
    sum_of_singles_s: float
    excess_s: float  # combined - sum, estimated by the contrast (paired when possible)
    excess_ci: tuple[float, float] | None
    p_value: float | None
    method: str  # "paired" (by block), "welch" (delta/Welch approximation) or "none"
    note: str
    # The same from every round of each arm; differs from the above on unbalanced data and is
    # shown only labelled "all rounds".
    combined_saving_all_rounds_s: float = float("nan")
    sum_of_singles_all_rounds_s: float = float("nan")


@dataclass(frozen=True)
class Attribution:
    baseline: str
    size: int
    metric: str
    confidence: float
    factors: tuple[FactorAttribution, ...]
    combined_arm: str | None
    combined: Comparison | None
    non_additivity: NonAdditivity | None
    share_method: ShareMethod
    note: str


def attribution(
    rounds: pd.DataFrame,
    *,
    arms: Mapping[str, frozenset[str]],
    factors: Sequence[str],
    baseline: str,
    metric: str,
    size: int,
    confidence: float = 0.95,
) -> Attribution:
    """Attribute the combined saving at ``size`` to ``factors``.

    ``arms`` maps each arm name to the set of factors switched on in it (the baseline maps to
    the empty set, or may be left out). Arms without rounds at ``size`` count as absent.
    """
    check_confidence(confidence)
    check_rounds(rounds, metric)
    by_set = _arms_by_factor_set(rounds, arms, factors, baseline, size)
    all_on = frozenset(factors)
    combined_arm = by_set.get(all_on)

    def pair(base: str, treatment: str) -> Comparison:
        return compare_pair(rounds, Pair(base, treatment, size, metric, confidence))

    singles = {f: by_set.get(frozenset({f})) for f in factors}
    leave_outs = {f: by_set.get(all_on - {f}) for f in factors}
    alone = {f: pair(baseline, arm) if arm else None for f, arm in singles.items()}
    marginal = {
        f: pair(loo, combined_arm) if combined_arm and loo else None
        for f, loo in leave_outs.items()
    }
    alone = _holm_within(alone)
    marginal = _holm_within(marginal)
    combined = pair(baseline, combined_arm) if combined_arm else None

    notes: list[str] = []
    if combined_arm is None:
        notes.append("no combined arm: no non-additivity and no shares")
    non_additivity = None
    if combined_arm and len(factors) > 1:
        non_additivity = _non_additivity(
            rounds, singles, combined_arm, baseline, size, metric, confidence
        )
        if non_additivity is None:
            notes.append("non-additivity needs every single arm")

    subsets = [
        frozenset(c) for r in range(len(factors) + 1) for c in itertools.combinations(factors, r)
    ]
    shares: dict[str, Share]
    if (
        combined is not None
        and len(factors) <= MAX_SHAPLEY_FACTORS
        and all(s in by_set for s in subsets)
    ):
        share_method: ShareMethod = "shapley"
        shares = _shapley(rounds, by_set, factors, size, metric, confidence)
    else:
        share_method, shares, note = _approximate_shares(factors, alone, marginal, combined)
        if note:
            notes.append(note)
    ci = combined.savings_ci if combined is not None else None
    if ci is not None and ci[0] <= 0.0 <= ci[1]:
        # a percentage of a saving the run cannot tell from 0 reads as 775 % and -675 %:
        # the shares in seconds (with their intervals) stay, the percentages go
        if any(share[1] is not None for share in shares.values()):
            notes.append(
                "no share in %: the combined saving's interval includes 0, so a percentage of "
                "it means nothing; the shares in seconds stand"
            )
        shares = {f: (sh[0], None, sh[2]) for f, sh in shares.items()}

    return Attribution(
        baseline=baseline,
        size=int(size),
        metric=metric,
        confidence=confidence,
        factors=tuple(
            FactorAttribution(
                factor=f,
                single_arm=singles[f],
                leave_one_out_arm=leave_outs[f] if marginal[f] else None,
                alone=alone[f],
                marginal=marginal[f],
                share_s=shares[f][0],
                share_pct=shares[f][1],
                share_ci=shares[f][2],
            )
            for f in factors
        ),
        combined_arm=combined_arm,
        combined=combined,
        non_additivity=non_additivity,
        share_method=share_method,
        note="; ".join(notes),
    )


def _arms_by_factor_set(
    rounds: pd.DataFrame,
    arms: Mapping[str, frozenset[str]],
    factors: Sequence[str],
    baseline: str,
    size: int,
) -> dict[frozenset[str], str]:
    if not factors or len(set(factors)) != len(factors):
        raise UserError("factors must be a non-empty list without repeats", "attribution")
    if arms.get(baseline, frozenset()):
        raise UserError(f"baseline arm {baseline!r} has factors on", "attribution")
    if rows_for(rounds, baseline, size).empty:
        raise UserError(f"no rounds for baseline arm {baseline!r} at size {size}", "attribution")
    by_set: dict[frozenset[str], str] = {frozenset(): baseline}
    for name, on in arms.items():
        unknown = on - set(factors)
        if unknown:
            raise UserError(
                f"arm {name!r} switches on {', '.join(sorted(unknown))}, not in the factors",
                "attribution",
            )
        if name == baseline or rows_for(rounds, name, size).empty:
            continue
        if on in by_set:
            raise UserError(
                f"arms {by_set[on]!r} and {name!r} switch on the same factors",
                "attribution",
                "give each factor set one arm",
            )
        by_set[on] = name
    return by_set


def _holm_within(table: dict[str, Comparison | None]) -> dict[str, Comparison | None]:
    keys = [k for k, c in table.items() if c is not None]
    adjusted = holm([c.p_value for c in table.values() if c is not None])
    out = dict(table)
    for key, p in zip(keys, adjusted, strict=True):
        comparison = table[key]
        assert comparison is not None
        out[key] = dataclasses.replace(comparison, p_adjusted=p)
    return out


def _non_additivity(
    rounds: pd.DataFrame,
    singles: Mapping[str, str | None],
    combined_arm: str,
    baseline: str,
    size: int,
    metric: str,
    confidence: float,
) -> NonAdditivity | None:
    single_arms = [arm for arm in singles.values() if arm is not None]
    if len(single_arms) != len(singles):
        return None
    k = len(single_arms)
    # (B - C) - sum_f (B - S_f) = sum_f S_f - C - (k - 1) B. Accumulate: with k = 1 the single
    # arm is the combined arm and the contrast is 0, which the caller never asks for.
    coefficients: dict[str, float] = {baseline: -(k - 1.0), combined_arm: -1.0}
    for arm in single_arms:
        coefficients[arm] = coefficients.get(arm, 0.0) + 1.0
    excess = estimate_contrast(
        rounds,
        coefficients=coefficients,
        size=size,
        metric=metric,
        confidence=confidence,
        scale="raw",
    )
    matched = dict(excess.arm_means)
    everything = {a: float(rows_for(rounds, a, size)[metric].mean()) for a in coefficients}

    def savings(means: Mapping[str, float]) -> tuple[float, float]:
        combined = means[baseline] - means[combined_arm]
        return combined, sum(means[baseline] - means[a] for a in single_arms)

    combined_saving, sum_singles = savings(matched)
    combined_all, sum_all = savings(everything)
    return NonAdditivity(
        combined_saving_s=combined_saving,
        sum_of_singles_s=sum_singles,
        excess_s=excess.estimate,
        excess_ci=excess.ci,
        p_value=excess.p_value,
        method=excess.method,
        note=excess.note,
        combined_saving_all_rounds_s=combined_all,
        sum_of_singles_all_rounds_s=sum_all,
    )


def shapley_coefficients(
    by_set: Mapping[frozenset[str], str], factors: Sequence[str], factor: str
) -> dict[str, float]:
    """Coefficients on arm means whose contrast is ``factor``'s Shapley value of the saving.

    ``phi_f = sum_{S not containing f} |S|! (k-|S|-1)! / k! * (v(S + f) - v(S))`` with
    ``v(S) = mean(baseline) - mean(S)``, so each term is ``w * (mean(S) - mean(S + f))``.
    """
    k = len(factors)
    others = [g for g in factors if g != factor]
    coefficients: dict[str, float] = {}
    for r in range(k):
        weight = math.factorial(r) * math.factorial(k - r - 1) / math.factorial(k)
        for subset in itertools.combinations(others, r):
            without = by_set[frozenset(subset)]
            with_f = by_set[frozenset(subset) | {factor}]
            coefficients[without] = coefficients.get(without, 0.0) + weight
            coefficients[with_f] = coefficients.get(with_f, 0.0) - weight
    return coefficients


def _shapley(
    rounds: pd.DataFrame,
    by_set: Mapping[frozenset[str], str],
    factors: Sequence[str],
    size: int,
    metric: str,
    confidence: float,
) -> dict[str, Share]:
    values = {
        f: estimate_contrast(
            rounds,
            coefficients=shapley_coefficients(by_set, factors, f),
            size=size,
            metric=metric,
            confidence=confidence,
            scale="raw",
        )
        for f in factors
    }
    # The Shapley values add up to the combined saving (efficiency); shares are of that total.
    total = sum(v.estimate for v in values.values())
    return {
        f: (v.estimate, v.estimate / total * 100.0 if total else None, v.ci)
        for f, v in values.items()
    }


def _approximate_shares(
    factors: Sequence[str],
    alone: Mapping[str, Comparison | None],
    marginal: Mapping[str, Comparison | None],
    combined: Comparison | None,
) -> tuple[ShareMethod, dict[str, Share], str]:
    empty: dict[str, Share] = {f: (None, None, None) for f in factors}
    if combined is None:
        return "unavailable", empty, ""
    averages: dict[str, float] = {}
    for f in factors:
        known = [c.savings_s for c in (alone[f], marginal[f]) if c is not None]
        if not known:
            return "unavailable", empty, f"no single or leave-one-out arm for {f}: no shares"
        averages[f] = sum(known) / len(known)
    total = sum(averages.values())
    if total == 0.0:
        return "unavailable", empty, "alone and marginal savings sum to 0: no shares"
    shares: dict[str, Share] = {
        f: (a / total * combined.savings_s, a / total * 100.0, None) for f, a in averages.items()
    }
    note = (
        "shares are approximate (no full factorial): average of alone and marginal savings, "
        "normalised to the combined saving"
    )
    return "approximate", shares, note
