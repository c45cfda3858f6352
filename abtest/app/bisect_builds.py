"""The builds `abtest bisect` searches, in order, and who makes and places them.

The range is (a) an explicit ``--builds`` list; (b) the prefixes of a patch series when ``--bad``
is ``REL+SERIES`` and ``--good`` is ``REL`` (``REL``, ``REL+SERIES.p1``, ..., ``REL+SERIES``);
or (c) the final releases the Go module proxy serves from ``--good`` to ``--bad``. Every build is
checked (name, series, skew) before anything is built or the node touched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from abtest.config.kubelet_series import BuildName, parse_build_name, series_prefixes
from abtest.errors import UserError

Say = Callable[[str], None]


class Builder(Protocol):
    """Makes the builds of a bisection available on the node."""

    def check(self, builds: Sequence[BuildName]) -> None:
        """Refuse (UserError naming the build) what cannot be made or run, building nothing."""

    def place(self, builds: Sequence[BuildName], say: Say) -> None:
        """Build (cached) and place the builds where the node profile's builds_dir finds them."""


@dataclass(frozen=True)
class LabBuilder:
    """The lab builds and places the builds itself (`abtest lab kubelets`)."""

    def check(self, builds: Sequence[BuildName]) -> None:
        from abtest.lab.kubelet_builds import check_builds
        from abtest.lab.layout import Paths
        from abtest.lab.releases import DEFAULT_RELEASE, kept_release

        check_builds(list(builds), kept_release(Paths()) or DEFAULT_RELEASE)

    def place(self, builds: Sequence[BuildName], say: Say) -> None:
        from abtest.lab.kubelet_builds import place_kubelets

        place_kubelets(list(builds), say)


@dataclass(frozen=True)
class PlacedBuilder:
    """Another node: each step's pre-flight places the builds the node lacks (built here for
    its architecture first when they are not cached; kubelet.place_builds), then reads each
    before the first change and refuses one that is missing or that the skew policy does not
    allow."""

    def check(self, builds: Sequence[BuildName]) -> None:
        return None

    def place(self, builds: Sequence[BuildName], say: Say) -> None:
        say(f"the pre-flight places {', '.join(b.name for b in builds)} where the node lacks them")


def lab_profile(builds_dir: str | None) -> bool:
    """Whether a profile's builds_dir is this machine's lab's (its builds the lab can place)."""
    from abtest.lab.layout import Paths

    return builds_dir is not None and builds_dir.rstrip("/") == str(Paths().kubelets)


def build_range(
    good: str | None,
    bad: str | None,
    builds: Sequence[str],
    releases: Callable[[BuildName, BuildName], list[BuildName]],
) -> list[BuildName]:
    """The ordered builds from good to bad (both included); ``releases(good, bad)`` lists the
    served releases between two plain releases (the Go module proxy's, or a test's)."""
    if builds:
        listed = [parse_build_name(b, "--builds") for b in builds]
        if good or bad:
            ends = [
                parse_build_name(x, flag) for x, flag in ((good, "--good"), (bad, "--bad")) if x
            ]
            if (good and ends[0].name != listed[0].name) or (
                bad and ends[-1].name != listed[-1].name
            ):
                raise UserError(
                    "--good and --bad must be the first and last of --builds",
                    "--builds",
                    "give the list from the good build to the bad one, or leave out --good/--bad",
                )
        return checked_range(listed)
    if not (good and bad):
        raise UserError(
            "name the range", "abtest bisect", "give --good A --bad B, or --builds B1,B2,..."
        )
    g, b = parse_build_name(good, "--good"), parse_build_name(bad, "--bad")
    if g.name == b.name:
        raise UserError(f"--good and --bad are the same build {g}", "--bad", "give the bad build")
    if b.series and g.release == b.release and g.series in (None, b.series):
        # a series' prefixes, or a part of them (--good REL+S.p1 --bad REL+S.p3)
        whole = series_prefixes(replace(b, prefix=None))
        chain = [x.name for x in whole]
        if g.name in chain and b.name in chain and chain.index(g.name) < chain.index(b.name):
            return checked_range(whole[chain.index(g.name) : chain.index(b.name) + 1])
    if g.series is None and b.series is None:
        if g.release > b.release:
            raise UserError(
                f"--good {g} is newer than --bad {b}", "--good", "the good build is the older one"
            )
        served = releases(g, b)
        for end, flag in ((g, "--good"), (b, "--bad")):
            if end.name not in {s.name for s in served}:
                raise UserError(
                    f"{end} is not a release the Go module proxy serves",
                    flag,
                    "name a served release",
                )
        return checked_range(served)
    raise UserError(
        f"no range from {g} to {b} can be made",
        "--good/--bad",
        "bisect releases (--good v1.34.4 --bad v1.36.3), a series' patches (--good v1.36.3 "
        "--bad v1.36.3+SERIES), or list the builds with --builds",
    )


def served_builds(good: BuildName, bad: BuildName) -> list[BuildName]:
    """The final releases the Go module proxy serves from good to bad, as builds."""
    from abtest.lab.releases import served_releases

    return [BuildName(r) for r in served_releases(good.release, bad.release)]


def checked_range(builds: list[BuildName]) -> list[BuildName]:
    """The range if it can be bisected: each build once, a good and a bad end (the rule a
    stored bisection's range is held to as well). Two builds are a range with nothing between
    its ends: confirmed slower, the bad end is the first bad build, with no search."""
    names = [b.name for b in builds]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise UserError(f"build {twice} is in the range twice", "--builds", "name each once")
    if len(builds) < 2:
        which = " and ".join(names) or "nothing"
        raise UserError(
            f"the range holds {len(builds)} build(s) ({which}): a bisection needs a good end "
            "and a bad end",
            "abtest bisect",
            "name at least two builds, the good one first",
        )
    return builds
