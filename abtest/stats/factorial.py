"""Main effects and two-factor interactions from a (full or fractional) factorial design.

Model, on the log scale (effects are multiplicative, noise is closer to symmetric there)::

    log y = b0 + sum_f b_f x_f + sum_{f<g} b_fg x_f x_g [+ block effects] + e

with each factor coded ``x = -1`` (off) / ``+1`` (on), fitted by ordinary least squares over
all rounds at one size. When every round has a block label, block indicator columns absorb
block-to-block drift (randomized complete blocks). Reported effects are the classical factorial
effects, ``2 b``: for a main effect, the change in ``log y`` from switching the factor on,
averaged over the other factors; for an interaction ``f:g``, half the difference between f's
effect with g on and with g off. Each is also shown as a percent reduction
``(1 - exp(effect)) * 100`` (for a main effect: how much faster the factor makes the batch).
Intervals are t-intervals from the OLS covariance with the residual degrees of freedom.

Fractional designs of resolution >= V estimate every main effect and two-factor interaction
(aliased only with higher-order terms). If the design cannot separate the interactions (lower
resolution), only main effects are fitted and ``note`` says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from abtest.errors import NO_VARIATION, UserError
from abtest.stats.frame import ARM, BLOCK, SIZE, check_rounds, has_blocks
from abtest.stats.intervals import (
    FloatArray,
    check_confidence,
    no_variation,
    pct_reduction_ci,
    pct_reduction_from_log_ratio,
)


@dataclass(frozen=True)
class FactorialEffect:
    term: tuple[str, ...]  # (f,) for a main effect, (f, g) for an interaction
    log_effect: float  # 2 * coefficient, natural-log scale
    log_ci: tuple[float, float] | None
    pct_reduction: float  # (1 - exp(log_effect)) * 100
    pct_ci: tuple[float, float] | None
    p_value: float | None


@dataclass(frozen=True)
class FactorialEffects:
    size: int
    metric: str
    confidence: float
    main: tuple[FactorialEffect, ...]
    interactions: tuple[FactorialEffect, ...]
    n_rounds: int
    residual_df: int
    blocked: bool  # block effects were in the model
    note: str


def factorial_effects(
    rounds: pd.DataFrame,
    *,
    arms: Mapping[str, frozenset[str]],
    factors: Sequence[str],
    metric: str,
    size: int,
    confidence: float = 0.95,
) -> FactorialEffects:
    """Fit the ±1-coded log-scale model at ``size`` over the rounds of the arms in ``arms``."""
    check_confidence(confidence)
    check_rounds(rounds, metric)
    if not factors or len(set(factors)) != len(factors):
        raise UserError("factors must be a non-empty list without repeats", "factorial effects")
    for name, on in arms.items():
        if on - set(factors):
            raise UserError(f"arm {name!r} switches on factors not in the design", "factorial")
    selected = rounds[(rounds[SIZE] == size) & rounds[ARM].isin(list(arms))]
    if selected.empty:
        raise UserError(f"no rounds of the design's arms at size {size}", "factorial effects")
    y = np.log(selected[metric].to_numpy(dtype=np.float64))
    coded = np.array(
        [[1.0 if f in arms[str(a)] else -1.0 for f in factors] for a in selected[ARM]],
        dtype=np.float64,
    )
    pairs = list(itertools.combinations(range(len(factors)), 2))
    blocked = has_blocks(selected)
    nuisance = _block_columns(selected) if blocked else np.empty((len(y), 0))
    intercept = np.ones((len(y), 1))
    interactions = np.column_stack([coded[:, i] * coded[:, j] for i, j in pairs]) if pairs else None

    note = ""
    with_interactions = interactions is not None
    if interactions is not None:
        design = np.hstack([intercept, coded, interactions, nuisance])
        if np.linalg.matrix_rank(design) < design.shape[1]:
            with_interactions = False
            # a resolution III screen (or IV): say what that costs the reader, not just the fit
            note = (
                "two-factor interactions are aliased in this design: main effects only, and "
                "each main effect may carry part of an interaction it is aliased with"
            )
    if not with_interactions:
        design = np.hstack([intercept, coded, nuisance])
        if np.linalg.matrix_rank(design) < design.shape[1]:
            raise UserError(
                "the arms measured at this size cannot separate the factors' main effects",
                f"factorial effects at size {size}",
                "measure a factorial (or resolution >= III fractional) set of arms",
            )

    coef, se, df = _ols(design, y)
    terms: list[tuple[str, ...]] = [(f,) for f in factors]
    if with_interactions:
        terms += [(factors[i], factors[j]) for i, j in pairs]
    if df < 1:
        note = "; ".join(filter(None, [note, "no residual degrees of freedom: no intervals"]))
    # An effect is 2 x a coefficient of log times: rounding is relative to the largest |log y|.
    magnitude = 2.0 * max(1.0, float(np.abs(y).max()))
    effects = [
        _effect(
            term,
            float(2.0 * coef[1 + index]),
            float(2.0 * se[1 + index]),
            df,
            confidence,
            magnitude,
        )
        for index, term in enumerate(terms)
    ]
    if df >= 1 and all(e.log_ci is None for e in effects):
        note = "; ".join(filter(None, [note, NO_VARIATION]))
    return FactorialEffects(
        size=int(size),
        metric=metric,
        confidence=confidence,
        main=tuple(effects[: len(factors)]),
        interactions=tuple(effects[len(factors) :]),
        n_rounds=len(y),
        residual_df=df,
        blocked=blocked,
        note=note,
    )


def _block_columns(selected: pd.DataFrame) -> FloatArray:
    # Indicator for every block but the first (the intercept carries the first).
    dummies = pd.get_dummies(selected[BLOCK].astype(str), drop_first=True, dtype=float)
    return dummies.to_numpy(dtype=np.float64)


def _ols(design: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray, int]:
    solution = np.linalg.lstsq(design, y, rcond=None)[0]
    coef = np.asarray(solution, dtype=np.float64)
    df = int(design.shape[0] - design.shape[1])
    if df < 1:
        return coef, np.full_like(coef, np.nan), df
    residuals = y - design @ coef
    sigma2 = float(residuals @ residuals) / df
    covariance = sigma2 * np.linalg.inv(design.T @ design)
    return coef, np.asarray(np.sqrt(np.diag(covariance)), dtype=np.float64), df


def _effect(
    term: tuple[str, ...], effect: float, se: float, df: int, confidence: float, magnitude: float
) -> FactorialEffect:
    if df < 1 or bool(no_variation(se, magnitude)):
        return FactorialEffect(term, effect, None, pct_reduction_from_log_ratio(effect), None, None)
    half = float(sps.t.ppf(0.5 + confidence / 2.0, df)) * se
    lo, hi = effect - half, effect + half
    p_value = float(2.0 * sps.t.sf(abs(effect / se), df))
    return FactorialEffect(
        term=term,
        log_effect=effect,
        log_ci=(lo, hi),
        pct_reduction=pct_reduction_from_log_ratio(effect),
        pct_ci=pct_reduction_ci((lo, hi)),
        p_value=p_value,
    )
