"""Extra kubelet releases for kubelet_build arms (`abtest lab kubelets`): built once, placed in
the lab's builds directory, where the lab profile's ``kubelet.builds_dir`` finds them."""

from __future__ import annotations

from pathlib import Path

from abtest.config.domain import Release, parse_release, skew_problem
from abtest.errors import UserError
from abtest.lab import host
from abtest.lab.binaries import binary_set, ensure_binaries
from abtest.lab.files import install_binary, make_dir
from abtest.lab.layout import Paths, Say
from abtest.lab.releases import DEFAULT_RELEASE, kept_release, served


def placed_kubelets(paths: Paths) -> list[str]:
    """The kubelet releases placed in the lab's builds directory, oldest first."""
    if not paths.kubelets.is_dir():
        return []
    found = []
    for d in paths.kubelets.iterdir():
        try:
            release = parse_release(d.name, str(d))
        except UserError:
            continue
        if (d / "kubelet").is_file():
            found.append(release)
    return [r.version for r in sorted(found)]


def place_kubelets(
    wanted: list[Release], say: Say = print, paths: Paths | None = None
) -> list[Path]:
    """Build (once, cached) and place each kubelet release in the lab's builds directory,
    where the lab profile's ``kubelet.builds_dir`` finds it. Every release is checked first
    (served, and allowed under the lab's API server by the skew policy): a bad one is
    refused before anything is built or placed."""
    paths = paths or Paths()
    host.require_root()
    control_plane = kept_release(paths) or DEFAULT_RELEASE
    for release in wanted:
        problem = skew_problem(release, control_plane)
        if problem:
            raise UserError(
                problem,
                f"kubelet release {release}",
                f"choose a release from v{control_plane.major}.{max(34, control_plane.minor - 3)}"
                f".0 to {control_plane}, the lab's control plane",
            )
    for release in wanted:
        if binary_set(release, ("kubelet",)).missing():
            problem = served(release)
            if problem:
                raise UserError(problem, f"kubelet release {release}", "choose a served release")
    placed = []
    for release in wanted:
        bins = ensure_binaries(say, release=release, names=("kubelet",))
        dest = paths.kubelets / release.version
        make_dir(paths.kubelets)
        make_dir(dest)
        install_binary(bins.path("kubelet"), dest / "kubelet")
        say(f"kubelet {release} at {dest / 'kubelet'}")
        placed.append(dest / "kubelet")
    return placed
