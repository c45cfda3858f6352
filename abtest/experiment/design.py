"""Designs: which arms (node configurations) an experiment runs. Pure, no I/O.

An arm is named after the set of factors it turns on, the same way in every design, so the
same configuration has the same name whether it came from ``gates --all`` or a factorial:

* nothing on: ``baseline``; one factor on: ``+GateA``; every factor on (two or more
  factors): ``combined``; all but one on (three or more factors): ``combined-GateA``;
* anything else: the on-factors in catalog order, ``+GateA+GateC``.

Fractional factorials (k > 4) use the standard minimum-aberration generators (Montgomery,
*Design and Analysis of Experiments*, table of 2^(k-p) designs). The sign of each generator
is chosen so that the fraction contains the all-off run (the baseline): a generator word
with an even number of base letters gets a minus sign (``E = -ABCD``), an odd one a plus
sign (``F = +ABCDE``). The sign picks which fraction is run; it does not change the
resolution. :func:`resolution` computes the resolution of any regular +-1 design from its
defining relation, and the tests use it to prove every fraction here has resolution >= V.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from abtest.domain import Arm, Factor, arm_parts
from abtest.errors import UserError

DESIGNS: tuple[str, ...] = ("baseline", "singles", "combined", "leave-one-out", "factorial")

#: Largest k run as a full 2^k factorial; above it a fractional design is used.
MAX_FULL_FACTORIAL = 4

#: Factor letters in the textbook convention (``I`` is skipped: it denotes the identity).
LETTERS = "ABCDEFGHJKL"


@dataclass(frozen=True)
class Fraction:
    """A 2^(k-p) fractional factorial: the base factors run a full factorial, the last p
    factors are generated as products of base factors."""

    k: int
    generators: tuple[str, ...]  # one word of base letters per generated factor
    resolution: int  # as published; re-proved by the tests with resolution()

    @property
    def p(self) -> int:
        return len(self.generators)

    @property
    def runs(self) -> int:
        return 1 << (self.k - self.p)

    def describe(self) -> str:
        """E.g. ``2^(8-2) res V: G = -ABCD, H = -ABEF``."""
        roman = {4: "IV", 5: "V", 6: "VI", 7: "VII"}[self.resolution]
        base = self.k - self.p
        gens = ", ".join(
            f"{LETTERS[base + i]} = {'+' if _generator_sign(w) > 0 else '-'}{w}"
            for i, w in enumerate(self.generators)
        )
        return f"2^({self.k}-{self.p}) res {roman}: {gens}"


FRACTIONS: dict[int, Fraction] = {
    5: Fraction(5, ("ABCD",), 5),
    6: Fraction(6, ("ABCDE",), 6),
    7: Fraction(7, ("ABCDEF",), 7),
    8: Fraction(8, ("ABCD", "ABEF"), 5),
    9: Fraction(9, ("ACDFG", "BCEFG"), 6),
    10: Fraction(10, ("ABCG", "BCDE", "ACDF"), 5),
    11: Fraction(11, ("ABCG", "BCDE", "ACDF", "ABCDEFG"), 5),
}

MAX_FACTORIAL_FACTORS = max(FRACTIONS)


# --------------------------------------------------------------------------- naming


def arm_name(on: Iterable[str], factors: Sequence[Factor]) -> str:
    """The readable, stable name of the configuration turning ``on`` on (see module doc)."""
    on_set = frozenset(on)
    names = [f.name for f in factors]
    unknown = on_set - set(names)
    if unknown:
        raise ValueError(f"not factors of this design: {sorted(unknown)}")
    k = len(names)
    if not on_set:
        return "baseline"
    if len(on_set) == 1:
        return "+" + next(iter(on_set))
    if len(on_set) == k:
        return "combined"
    if len(on_set) == k - 1:
        (off,) = [n for n in names if n not in on_set]
        return "combined-" + off
    return "".join("+" + n for n in names if n in on_set)


def make_arm(on: Iterable[str], factors: Sequence[Factor]) -> Arm:
    """The arm turning ``on`` on and every other factor explicitly off."""
    on_set = frozenset(on)
    settings, runtime_class, annotations = arm_parts(on_set, factors)
    return Arm(
        name=arm_name(on_set, factors),
        on=on_set,
        settings=settings,
        runtime_class=runtime_class,
        annotations=annotations,
    )


# --------------------------------------------------------------------------- designs


def _check_factors(factors: Sequence[Factor]) -> None:
    if not factors:
        raise UserError(
            "no factors to build arms from",
            where="design",
            todo="name at least one factor or use a catalog that has some",
        )
    seen: set[str] = set()
    paths: set[str] = set()
    for f in factors:
        if f.name in seen:
            raise UserError(f"factor {f.name!r} is listed twice", where="design")
        for target in f.targets:  # a kubelet path, or the pod's runtime class / an annotation
            if target in paths:
                raise UserError(f"two factors set the same path {target!r}", where="design")
            paths.add(target)
        seen.add(f.name)


def build_arms(factors: Sequence[Factor], design: str) -> list[Arm]:
    """The arms of ``design`` over ``factors`` (catalog order is kept)."""
    _check_factors(factors)
    names = [f.name for f in factors]
    everything = frozenset(names)
    ons: list[frozenset[str]]
    if design == "baseline":
        ons = [frozenset()]
    elif design == "singles":
        ons = [frozenset({n}) for n in names]
    elif design == "combined":
        ons = [everything]
    elif design == "leave-one-out":
        ons = [everything - {n} for n in names]
    elif design == "factorial":
        ons = [
            frozenset(n for n, level in zip(names, row, strict=True) if level > 0)
            for row in factorial_matrix(len(names))
        ]
    else:
        raise UserError(
            f"unknown design {design!r}",
            where="design",
            todo="use one of: " + ", ".join(DESIGNS),
        )
    return [make_arm(on, factors) for on in ons]


def gates_all(factors: Sequence[Factor], attribution: bool) -> list[Arm]:
    """baseline + singles + combined (+ leave-one-out with ``attribution``), one arm per
    distinct configuration, first occurrence kept (so with one factor the single is also
    the combined arm, and with two factors the leave-one-out arms are the singles)."""
    designs = ["baseline", "singles", "combined"]
    if attribution:
        designs.append("leave-one-out")
    return dedupe([arm for d in designs for arm in build_arms(factors, d)])


def dedupe(arms: Iterable[Arm]) -> list[Arm]:
    """Keep the first arm of each distinct set of on-factors."""
    seen: set[frozenset[str]] = set()
    out: list[Arm] = []
    for arm in arms:
        if arm.on not in seen:
            seen.add(arm.on)
            out.append(arm)
    return out


# --------------------------------------------------------------------------- factorials


def _generator_sign(word: str) -> int:
    """+1 or -1 so that the all-low base run generates a low level (baseline in fraction)."""
    return 1 if len(word) % 2 == 1 else -1


def full_factorial(k: int) -> list[tuple[int, ...]]:
    """All 2^k runs of +-1 levels in standard (Yates) order: column 0 alternates fastest,
    run 0 is all -1."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return [tuple(1 if (r >> j) & 1 else -1 for j in range(k)) for r in range(2**k)]


def factorial_matrix(k: int) -> list[tuple[int, ...]]:
    """The +-1 design matrix used for ``factorial`` with k factors: full for k <= 4,
    the fraction in :data:`FRACTIONS` above. Run 0 is the baseline (all -1)."""
    if k < 1:
        raise UserError("a factorial needs at least one factor", where="design")
    if k <= MAX_FULL_FACTORIAL:
        return full_factorial(k)
    frac = FRACTIONS.get(k)
    if frac is None:
        raise UserError(
            f"no factorial design for {k} factors (at most {MAX_FACTORIAL_FACTORS})",
            where="design",
            todo="limit the factors (abtest gates NAME ...) or use --attribution instead",
        )
    base = k - frac.p
    rows = []
    for run in full_factorial(base):
        row = list(run)
        for word in frac.generators:
            level = _generator_sign(word)
            for letter in word:
                level *= run[LETTERS.index(letter)]
            row.append(level)
        rows.append(tuple(row))
    return rows


def _columns_as_masks(design_matrix: Sequence[Sequence[int]]) -> tuple[int, int, list[int]]:
    """(runs, factors, one bitmask per column with bit r set where run r is at -1)."""
    n = len(design_matrix)
    if n == 0:
        raise ValueError("empty design matrix")
    k = len(design_matrix[0])
    if k == 0:
        raise ValueError("design matrix has no columns")
    masks = [0] * k
    for r, row in enumerate(design_matrix):
        if len(row) != k:
            raise ValueError(f"run {r} has {len(row)} levels, expected {k}")
        for j, level in enumerate(row):
            if level == -1:
                masks[j] |= 1 << r
            elif level != 1:
                raise ValueError(f"run {r} column {j}: level {level!r} is not +1 or -1")
    return n, k, masks


def defining_relation(design_matrix: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """The words of the defining relation: every non-empty set of columns whose
    element-wise product is constant over the runs (columns as 0-based indices), shortest
    first. Raises ValueError if the design is not a regular two-level design (some product
    neither constant nor balanced)."""
    n, k, masks = _columns_as_masks(design_matrix)
    full = (1 << n) - 1
    words: list[tuple[int, ...]] = []
    product = [0] * (1 << k)  # product[s] = bitmask of runs where prod of columns in s is -1
    for s in range(1, 1 << k):
        low = s & -s
        product[s] = product[s ^ low] ^ masks[low.bit_length() - 1]
        minus = product[s].bit_count()
        if product[s] in (0, full):
            words.append(tuple(j for j in range(k) if (s >> j) & 1))
        elif 2 * minus != n:
            raise ValueError("not a regular two-level design: an interaction is unbalanced")
    return sorted(words, key=lambda w: (len(w), w))


def resolution(design_matrix: Sequence[Sequence[int]]) -> int:
    """The resolution of a regular +-1 design: the length of the shortest word in its
    defining relation. A design with no word at all (a full factorial) returns
    ``factors + 1``, which exceeds any possible word length."""
    words = defining_relation(design_matrix)
    if not words:
        return len(design_matrix[0]) + 1
    return len(words[0])
