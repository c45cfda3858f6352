"""Pure statistics on rounds frames: pandas/numpy in, frozen dataclasses out, no I/O.

See ``compare`` for the method (log-scale ratios, block pairing, t-intervals) and why.
"""

from abtest.stats.attribution import (
    Attribution,
    FactorAttribution,
    NonAdditivity,
    ShareMethod,
    attribution,
)
from abtest.stats.compare import Comparison, compare, compare_pair, uncomparable
from abtest.stats.contrast import ContrastEstimate, estimate_contrast
from abtest.stats.factorial import FactorialEffect, FactorialEffects, factorial_effects
from abtest.stats.frame import ARM, BLOCK, METRICS, SIZE, Pair
from abtest.stats.intervals import TIntervals, holm, one_sample_t, welch_contrast, welch_t
from abtest.stats.percentiles import nearest_rank
from abtest.stats.regress_decision import Decision, Verdict, overall_verdict, regression_decision

__all__ = [
    "ARM",
    "BLOCK",
    "METRICS",
    "SIZE",
    "Attribution",
    "Comparison",
    "ContrastEstimate",
    "Decision",
    "FactorAttribution",
    "FactorialEffect",
    "FactorialEffects",
    "NonAdditivity",
    "Pair",
    "ShareMethod",
    "TIntervals",
    "Verdict",
    "attribution",
    "compare",
    "compare_pair",
    "estimate_contrast",
    "factorial_effects",
    "holm",
    "nearest_rank",
    "one_sample_t",
    "overall_verdict",
    "regression_decision",
    "uncomparable",
    "welch_contrast",
    "welch_t",
]
