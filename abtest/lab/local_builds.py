"""Kubelet builds on the controller, for any node: `abtest kubelets build` and placement.

The same builders as `abtest lab kubelets` (a release's kubelet from the Go module proxy,
:func:`abtest.lab.binaries.ensure_binaries`; a release plus a series,
:func:`abtest.lab.patched_kubelets.ensure_patched_kubelet`), for the node's architecture
(``GOARCH``; cgo is off in every build, so an amd64 controller builds an arm64 kubelet with
Go alone), into the same cache. Nothing here is the lab's: no lab state is read, no skew is
checked against the lab's API server (the pre-flight checks each build against the node's).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abtest.config.build_names import BUILD_BINARY, BuildName
from abtest.config.goarch import cache_suffix
from abtest.config.kubelet_series import PatchSeries, load_series
from abtest.errors import UserError
from abtest.lab.binaries import binary_set, ensure_binaries
from abtest.lab.patched_kubelets import SOURCE_FILE, cached_dir, ensure_patched_kubelet, is_built
from abtest.lab.releases import served

Say = Callable[[str], None]


@dataclass(frozen=True)
class LocalBuild:
    """A build in the controller's cache: its binary, sha256 and (patched) source record."""

    build: BuildName
    goarch: str | None
    binary: Path
    sha256: str
    source: bytes | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "build": self.build.name,
            "goarch": self.goarch,
            "binary": str(self.binary),
            "sha256": self.sha256,
        }


# a kubelet is ~80 MB: hashed once per process for the file as it is (size, mtime)
_DIGESTS: dict[tuple[Path, int, int], str] = {}


def file_digest(path: Path) -> str:
    st = path.stat()
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def _series(build: BuildName) -> PatchSeries | None:
    """The series to build, None for a release; a series not on this machine (a build
    placed on a node under its name from someone's folder) is a UserError."""
    return load_series(build) if build.series else None


def cached_path(build: BuildName, goarch: str | None) -> Path | None:
    """The cached binary of this build for ``goarch`` (None: not built yet, or its series is
    not on this machine)."""
    try:
        series = _series(build)
    except UserError:
        return None
    if series is None:
        path = binary_set(build.release, ("kubelet",), goarch).path("kubelet")
        return path if os.access(path, os.X_OK) else None
    return cached_dir(series, goarch) / BUILD_BINARY if is_built(series, goarch) else None


def check_buildable(builds: list[BuildName], goarch: str | None) -> None:
    """Every build can be made here: its series loads and checks whole, its release is served
    (when it has to be built); a UserError naming the first that cannot, before any build."""
    for build in builds:
        series = _series(build)
        if series is None and cached_path(build, goarch) is None:
            problem = served(build.release)
            if problem:
                raise UserError(problem, f"kubelet build {build}", "choose a served release")


def local_build(build: BuildName, goarch: str | None, say: Say = print) -> LocalBuild:
    """The build for ``goarch`` from the cache, built there first when it is not."""
    series = _series(build)
    arch = goarch if cache_suffix(goarch) else None
    if series is None:
        bins = ensure_binaries(say, release=build.release, names=("kubelet",), goarch=arch)
        binary, source = bins.path("kubelet"), None
    else:
        folder = ensure_patched_kubelet(series, say, goarch=arch)
        binary = folder / BUILD_BINARY
        source = (folder / SOURCE_FILE).read_bytes()  # placed beside it as the lab does
    return LocalBuild(build, goarch, binary, file_digest(binary), source)


def build_kubelets(
    builds: list[BuildName], goarch: str | None, say: Say = print
) -> list[LocalBuild]:
    """`abtest kubelets build`: each build checked first, then built (once, cached)."""
    check_buildable(builds, goarch)
    return [local_build(b, goarch, say) for b in builds]
