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

``screen`` is the cheap first look at many candidate settings: a regular two-level fraction
of resolution >= III in the fewest runs that are a power of two above k (4 runs for 3
factors, 8 for up to 7, 16 for up to 15; :data:`SCREEN_GENERATORS`). Every main effect is
estimable, but each is aliased with two-factor interactions, so a screen ranks candidates
for a confirming run; it does not attribute. The same sign rule keeps the baseline in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from abtest.config.domain import DESIGN_PARTS, Arm, Factor, arm_parts
from abtest.errors import UserError

#: The arm sets one design part builds (the playbook and the CLI join them with "+").
DESIGNS = DESIGN_PARTS

#: Largest k run as a full 2^k factorial; above it a fractional design is used.
MAX_FULL_FACTORIAL = 4

#: Factor letters in the textbook convention (``I`` is skipped: it denotes the identity).
LETTERS = "ABCDEFGHJKLMNOPQ"


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
        roman = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII"}[self.resolution]
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

#: Generator words for screening fractions, by number of base factors (runs = 2^base),
#: taken in this order: the longest words first, so a fraction that is not saturated keeps
#: the highest resolution it can (2^(4-1) with D = ABC is resolution IV; 2^(8-4) with the
#: four three-letter words is the minimum-aberration resolution IV design); the two-letter
#: words that follow make it resolution III, saturated at k = runs - 1.
SCREEN_GENERATORS: dict[int, tuple[str, ...]] = {
    2: ("AB",),
    3: ("ABC", "AB", "AC", "BC"),
    4: ("ABC", "ABD", "ACD", "BCD", "ABCD", "AB", "AC", "AD", "BC", "BD", "CD"),
}

#: The most factors a screen takes (a saturated 16-run fraction).
MAX_SCREEN_FACTORS = 15


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
    parts = arm_parts(on_set, factors)
    return Arm(
        name=arm_name(on_set, factors),
        on=on_set,
        settings=parts.settings,
        kubelet=parts.kubelet,
        pod=parts.pod,
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
        seen.add(f.name)
        if not f.spec.exclusive:
            continue  # levels of one choice (kubelet builds): the kind checks the design
        for target in f.targets:  # a kubelet path, or the pod's runtime class / an annotation
            if target in paths:
                raise UserError(f"two factors set the same path {target!r}", where="design")
            paths.add(target)


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
    elif design in ("factorial", "screen"):
        matrix = factorial_matrix if design == "factorial" else screen_matrix
        ons = [
            frozenset(n for n, level in zip(names, row, strict=True) if level > 0)
            for row in matrix(len(names))
        ]
    else:
        raise UserError(
            f"unknown design {design!r}",
            where="design",
            todo="use one of: " + ", ".join(DESIGNS),
        )
    for spec in {f.spec.name: f.spec for f in factors}.values():
        spec.check_design(design, factors, ons)
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
    return _fraction_rows(frac)


def _fraction_rows(frac: Fraction) -> list[tuple[int, ...]]:
    """The runs of a 2^(k-p) fraction: a full factorial in the base factors, each generated
    column the signed product of its word's base columns."""
    base = frac.k - frac.p
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


def screen_fraction(k: int) -> Fraction | None:
    """The resolution >= III fraction a screen of k factors runs (None: k <= 2, the full
    2^k is already the smallest design that separates the main effects)."""
    if k < 1:
        raise UserError("a screen needs at least one factor", where="design")
    if k > MAX_SCREEN_FACTORS:
        raise UserError(
            f"no screening design for {k} factors (at most {MAX_SCREEN_FACTORS})",
            where="design",
            todo="split the candidates over two screens or drop the least plausible ones",
        )
    if k <= 2:
        return None
    base = k.bit_length()  # the fewest base factors with 2^base >= k + 1 runs
    generators = SCREEN_GENERATORS[base][: k - base]
    # the resolution comes from the whole defining relation (products of generators can
    # make shorter words than any generator), not from the generators' lengths
    res = resolution(_fraction_rows(Fraction(k, generators, 0)))
    return Fraction(k, generators, res)


def screen_matrix(k: int) -> list[tuple[int, ...]]:
    """The +-1 design matrix of ``screen`` with k factors; run 0 is the baseline."""
    frac = screen_fraction(k)
    if frac is None:
        return full_factorial(k)
    return _fraction_rows(frac)


def design_description(design: str, k: int) -> str:
    """What a design over k factors is, in one line, with what it can and cannot separate
    (for ``abtest plan`` and the report's method section); "" for the simple designs."""
    if design == "screen":
        frac = screen_fraction(k)
        if frac is None:
            return f"screen of {k} factors: the full 2^{k} factorial ({1 << k} arms)"
        return (
            f"screen {frac.describe()} ({frac.runs} arms, the baseline among them): main "
            "effects only, each aliased with two-factor interactions, so a factor's effect "
            "may carry part of an interaction of two others; confirm a screen's picks with "
            "a gates-all or factorial run"
        )
    if design == "factorial":
        if k <= MAX_FULL_FACTORIAL:
            return f"full 2^{k} factorial ({1 << k} arms)"
        frac = FRACTIONS.get(k)
        if frac is not None:
            return (
                f"fractional {frac.describe()} ({frac.runs} arms): main effects and "
                "two-factor interactions, aliased only with higher-order terms"
            )
    return ""


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
