"""The releases `abtest bisect` searches between two (lab.releases.releases_between)."""

from __future__ import annotations

from abtest.config.domain import Release
from abtest.lab.releases import releases_between

LISTED = (
    "k8s.io/kubernetes v0.4.0 v1.9.0 v1.33.9 v1.34.0 v1.34.4 v1.35.0-rc.1 v1.35.4 v1.36.0-beta.0 "
    "v1.36.1 v1.36.3 v1.36.10 v1.37.0"
)


def test_final_releases_between_the_two_in_semver_order() -> None:
    found = releases_between(LISTED, Release(1, 34, 4), Release(1, 36, 10))
    assert [r.version for r in found] == ["v1.34.4", "v1.35.4", "v1.36.1", "v1.36.3", "v1.36.10"]


def test_nothing_below_the_labs_minimum_and_nothing_outside() -> None:
    assert releases_between(LISTED, Release(1, 30, 0), Release(1, 34, 0)) == [Release(1, 34, 0)]
    assert releases_between("k8s.io/kubernetes", Release(1, 34, 0), Release(1, 36, 3)) == []
