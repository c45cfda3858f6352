"""Kubelet builds named ``RELEASE`` or ``RELEASE+SERIES``, and the patch series they carry.

A patch series is data (``kubelet-patches/NAME/`` in the repository, or a user's folder): a
``series.yaml`` naming the upstream release the patches are made against, and unified diffs
(``*.patch``, git format-patch style) applied in the order of their file names. A build of a
series is named ``v1.36.3+agc``: the release, then the series' name. A user's own series is
named by its folder path after the ``+`` (``v1.36.3+./my-series``); the build is then named
after the folder (``v1.36.3+my-series``), which is what a catalog's ``kubelet_build`` level and
the node's ``kubelet --version`` say.

A prefix of a series (its first k patches, for ``abtest bisect``) is a build of its own, named
``v1.36.3+agc.p2`` (the first two patches): build metadata semver allows, a path segment the
node's checks allow, so the node reports the prefix's whole name. It is loaded as a series of
those patches (named ``agc.p2``), so its digest, cache and ``source.json`` are its own. A series
name ending in ``.pN`` is therefore reserved: it always means a prefix.

Everything here is checked before anything is copied or built: the series' release, and each
patch read as ``git apply`` reads it (:mod:`abtest.config.series_patches`: every path inside
the source tree, no symlink, each gate registered once). A gate upstream already has (a clash)
and whether each patch applies are for the lab's builder, which has the release's source; it
applies the text :func:`checked_again` checked, not the folder as it is when git runs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

# a build's name and its parse have their own module (every layer names builds); named here
# too, where code that loads series imports them
from abtest.config.build_names import SERIES_FILE as SERIES_FILE
from abtest.config.build_names import BuildName as BuildName
from abtest.config.build_names import parse_build_name as parse_build_name
from abtest.config.build_names import series_root as series_root
from abtest.config.releases import Release, parse_release
from abtest.config.series_patches import Patch, read_patches
from abtest.config.yaml_input import load_yaml_file
from abtest.errors import UserError

_PATCH_SUFFIXES = (".patch", ".diff")
# files a series folder may hold besides its patches
_NOT_PATCHES = {SERIES_FILE, "README.md", "README"}
_GATE_CONST = re.compile(r'^\s*([A-Z][A-Za-z0-9]+)\s+featuregate\.Feature\s*=\s*"\1"', re.M)
SERIES_TODO = (
    "a series folder holds series.yaml (release: vX.Y.Z) and unified diffs named "
    "NNNN-what.patch, applied in name order; see kubelet-patches/README.md"
)


@dataclass(frozen=True)
class PatchSeries:
    """A loaded, checked series: its patches in order and a digest of their content."""

    name: str
    folder: Path
    release: Release
    patches: tuple[Patch, ...]

    @property
    def digest(self) -> str:
        """Changes when any patch, the order or the release changes (the build cache's key)."""
        h = hashlib.sha256(self.release.version.encode())
        for p in self.patches:
            h.update(f"\0{p.file}\0{p.sha256}".encode())
        return h.hexdigest()

    @property
    def gates(self) -> tuple[str, ...]:
        return tuple(g for p in self.patches for g in p.gates)

    def to_dict(self) -> dict[str, object]:
        return {
            "series": self.name,
            "release": self.release.version,
            "digest": self.digest,
            "patches": [p.to_dict() for p in self.patches],
        }


def shipped_series() -> list[str]:
    root = series_root()
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if (d / SERIES_FILE).is_file())


def load_series(build: BuildName) -> PatchSeries:
    """The series a build names, checked whole; one error naming the folder or file."""
    if build.series is None:
        raise UserError(f"{build} names no patch series", "kubelet build")
    folder = build.folder
    if folder is None:
        raise UserError(
            f"unknown patch series {build.series!r}",
            str(build),
            f"use a shipped series ({', '.join(shipped_series()) or 'none'}) or a folder path "
            f"after the '+', e.g. {build.release}+./my-series",
        )
    # exists, not is_file: the loader refuses a FIFO or a folder there by name
    if not folder.is_dir() or not (folder / SERIES_FILE).exists():
        raise UserError(f"no {SERIES_FILE} in {folder}", str(build), SERIES_TODO)
    release = _series_release(folder)
    if release != build.release:
        raise UserError(
            f"series {build.series} is made for {release}, not {build.release}",
            str(folder / SERIES_FILE),
            f"build it as {release}+{build.series}, or port its patches to {build.release}",
        )
    files = _patch_files(folder)
    if not files:
        raise UserError(f"series folder {folder} has no patches", str(build), SERIES_TODO)
    patches = read_patches(build.series, folder, files)
    if build.prefix is None:
        return PatchSeries(build.series, folder, release, patches)
    if build.prefix >= len(patches):
        raise UserError(
            f"series {build.series} has {len(patches)} patches: {build} is no prefix of it",
            str(build),
            f"a prefix takes the first 1 to {len(patches) - 1} patches; "
            f"{build.release}+{build.series} is the whole series",
        )
    return PatchSeries(build.series_name or "", folder, release, patches[: build.prefix])


def checked_again(series: PatchSeries) -> tuple[Patch, ...]:
    """The series' patches read from its folder again and checked whole: what a build applies
    is the text checked here, not whatever the folder holds by the time git runs. A patch
    that changed since the series was loaded is refused (the build is cached by the old one)."""
    paths = [series.folder / p.file for p in series.patches]
    patches = read_patches(series.name, series.folder, paths)
    for loaded, now in zip(series.patches, patches, strict=True):
        if loaded.sha256 != now.sha256:
            raise UserError(
                f"series {series.name}: {now.file} changed while the build was being prepared",
                str(series.folder / now.file),
                "build again once the series folder is not being edited",
            )
    return patches


def series_prefixes(build: BuildName) -> list[BuildName]:
    """The release, then the release with the series' first 1, 2, ... patches, then the whole
    series: the builds between ``RELEASE`` and ``RELEASE+SERIES``, in order."""
    count = len(load_series(replace(build, prefix=None)).patches)
    plain = BuildName(build.release)
    return [
        plain,
        *(replace(build, prefix=k) for k in range(1, count)),
        replace(build, prefix=None),
    ]


def _series_release(folder: Path) -> Release:
    where = str(folder / SERIES_FILE)
    doc = load_yaml_file(folder / SERIES_FILE, "series file")
    if not isinstance(doc, dict):
        raise UserError("not a mapping", where, "write `release: vX.Y.Z`")
    unknown = sorted(set(doc) - {"release", "description"})
    if unknown:
        raise UserError(f"unknown key {unknown[0]!r}", where, "keys: release, description")
    value = doc.get("release")
    if not isinstance(value, str):
        raise UserError("release must name the upstream release, e.g. v1.36.3", where)
    return parse_release(value, f"{where}: release")


def _patch_files(folder: Path) -> list[Path]:
    found = []
    for path in sorted(folder.iterdir()):
        if path.name in _NOT_PATCHES or path.name.startswith("."):
            continue
        if not path.is_file() or path.is_symlink() or not path.name.endswith(_PATCH_SUFFIXES):
            raise UserError(
                f"{path.name} is not a patch (a regular file named *.patch or *.diff)",
                str(folder),
                SERIES_TODO,
            )
        found.append(path)
    return found


def upstream_gates(features_go: str) -> set[str]:
    """The gates a release's pkg/features/kube_features.go declares."""
    return set(_GATE_CONST.findall(features_go))


def gate_clashes(series: PatchSeries, upstream: set[str]) -> list[str]:
    """One line per gate of the series that the release already has."""
    return [
        f"{p.file} registers feature gate {g}, which {series.release} already has"
        for p in series.patches
        for g in p.gates
        if g in upstream
    ]
