"""Extra kubelet builds for kubelet_build arms (`abtest lab kubelets`): releases (``v1.35.4``)
and releases plus a patch series (``v1.36.3+agc``), built once, placed in the lab's builds
directory (``<builds_dir>/<build>/kubelet``, with a patched build's ``source.json`` beside
it: :func:`abtest.config.build_names.build_folder`, the rule the node layer reads them by),
where the lab profile's ``kubelet.builds_dir`` finds them."""

from __future__ import annotations

import json
from pathlib import Path

from abtest.config.build_names import (
    BUILD_BINARY,
    BuildName,
    build_binary,
    build_folder,
    parse_build_name,
)
from abtest.config.domain import Release, skew_problem
from abtest.config.kubelet_series import PatchSeries, load_series
from abtest.config.paths import read_input
from abtest.errors import UserError
from abtest.lab import host, sdnode
from abtest.lab.binaries import binary_set, ensure_binaries
from abtest.lab.files import PUBLIC_FILE, install_binary, make_dir, write_file
from abtest.lab.layout import Paths, Say
from abtest.lab.patched_kubelets import (
    SOURCE_FILE,
    ensure_patched_kubelet,
    go_test_series,
    is_built,
)
from abtest.lab.releases import DEFAULT_RELEASE, kept_release, served


def placed_kubelets(paths: Paths) -> list[str]:
    """The kubelet builds placed in the lab's builds directory, oldest release first."""
    if not paths.kubelets.is_dir():
        return []
    found = []
    for d in paths.kubelets.iterdir():
        try:  # a folder's name is read as a build's (what is not one is not a build)
            build = parse_build_name(d.name, str(d), paths=False)
        except UserError:
            continue
        if Path(build_binary(str(paths.kubelets), build)).is_file():
            found.append((build.release, build.name))
    return [name for _, name in sorted(found)]


def placed_series_build(build: BuildName, paths: Paths) -> Path | None:
    """The folder of a series build placed under this name whose series is not here to load
    (a user's folder, placed as ``v1.36.3+FOLDERNAME``, which `lab kubelets` lists by that
    name): its kubelet and the source.json naming it. Such a build is used as placed, never
    rebuilt; None for anything else (a shipped series or a folder is loaded and checked)."""
    if build.series is None or build.folder is not None:
        return None
    folder = placed_folder(paths, build)
    try:
        record = json.loads(read_input(folder / SOURCE_FILE, str(folder), "", 64_000))
    except (UserError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("build") != build.name:
        return None
    return folder if (folder / BUILD_BINARY).is_file() else None


def placed_folder(paths: Paths, build: BuildName) -> Path:
    """Where the lab places a build on this machine (node 1's builds_dir)."""
    return Path(build_folder(str(paths.kubelets), build))


Source = PatchSeries | Path | None  # a series to build, a build placed already, a release


def check_builds(
    wanted: list[BuildName], control_plane: Release, paths: Paths | None = None
) -> list[Source]:
    """Every build checked before anything is built: allowed under the lab's API server by
    the skew policy, its series loaded and checked whole (or the build placed already under
    its name), its release served."""
    paths = paths or Paths()
    for build in wanted:
        problem = skew_problem(build.release, control_plane)
        if problem:
            raise UserError(
                problem,
                f"kubelet build {build}",
                f"choose a release from v{control_plane.major}.{max(34, control_plane.minor - 3)}"
                f".0 to {control_plane}, the lab's control plane",
            )
    series: list[Source] = [
        (placed_series_build(b, paths) or load_series(b)) if b.series else None for b in wanted
    ]
    for build, s in zip(wanted, series, strict=True):
        if isinstance(s, Path):
            continue  # placed: nothing to build
        needs_source = (
            binary_set(build.release, ("kubelet",)).missing() if s is None else not is_built(s)
        )
        if needs_source:
            problem = served(build.release)
            if problem:
                raise UserError(problem, f"kubelet build {build}", "choose a served release")
    return series


def place_kubelets(
    wanted: list[BuildName], say: Say = print, paths: Paths | None = None
) -> list[Path]:
    """Build (once, cached) and place each kubelet build in the lab's builds directory, where
    the lab profile's ``kubelet.builds_dir`` finds it. Every build is checked first: a bad
    one is refused before anything is built or placed."""
    paths = paths or Paths()
    host.require_root()
    control_plane = kept_release(paths) or DEFAULT_RELEASE
    series = check_builds(wanted, control_plane, paths)
    placed = []
    for build, s in zip(wanted, series, strict=True):
        if isinstance(s, Path):
            say(f"kubelet {build} placed already at {s / BUILD_BINARY}")
            placed.append(s / BUILD_BINARY)
            placed += _place_in_systemd_node(paths, build, s, say)
            continue
        if s is None:
            source = ensure_binaries(say, release=build.release, names=("kubelet",)).path("kubelet")
        else:
            source = ensure_patched_kubelet(s, say) / BUILD_BINARY
        dest = placed_folder(paths, build)
        make_dir(paths.kubelets)
        make_dir(dest)
        install_binary(source, dest / BUILD_BINARY)
        record = source.parent / SOURCE_FILE
        if s is not None:
            write_file(dest / SOURCE_FILE, record.read_bytes(), PUBLIC_FILE)
        else:
            (dest / SOURCE_FILE).unlink(missing_ok=True)
        say(f"kubelet {build} at {dest / BUILD_BINARY}")
        placed.append(dest / BUILD_BINARY)
        placed += _place_in_systemd_node(paths, build, dest, say)
    return placed


def _place_in_systemd_node(paths: Paths, build: BuildName, placed: Path, say: Say) -> list[Path]:
    """The same build inside the systemd node's root filesystem, when the lab has one (its
    profile's builds_dir): a kubelet_build arm there swaps in the same binary."""
    node = sdnode.SystemdNode(paths)
    if not node.rootfs.is_dir():
        return []
    dest = node.file(build_folder(sdnode.BUILDS_DIR, build))
    make_dir(dest.parent, 0o755)
    make_dir(dest, 0o755)
    install_binary(placed / BUILD_BINARY, dest / BUILD_BINARY)
    if (placed / SOURCE_FILE).is_file():
        write_file(dest / SOURCE_FILE, (placed / SOURCE_FILE).read_bytes(), PUBLIC_FILE)
    else:
        (dest / SOURCE_FILE).unlink(missing_ok=True)
    say(f"kubelet {build} in {sdnode.NAME} at {build_binary(sdnode.BUILDS_DIR, build)}")
    return [dest / BUILD_BINARY]


def test_series(wanted: list[BuildName], say: Say = print) -> list[str]:
    """The Go checks of each patched build's series (`lab kubelets --go-test`)."""
    lines = []
    for build in wanted:
        if build.series:
            lines += [f"{build}: {line}" for line in go_test_series(load_series(build), say)]
    return lines
