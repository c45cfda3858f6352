"""Upstream binaries for the lab, built once from the Go module proxy and cached by release.

Kubernetes is not packaged for Debian, so we build exactly the chosen upstream release:
a throwaway module requires ``k8s.io/kubernetes`` and pins every ``k8s.io/*`` staging module
(listed as ``v0.0.0`` + ``replace ./staging/...`` upstream) to the matching ``v0.MINOR.PATCH``.
etcd is built the same way because the API server wants etcd >= 3.5 (Debian ships 3.4), and
so is containerd: the reference node's v1.7.28 instead of Debian's 1.6.20 (end of life, and
without CRI calls newer kubelets make). Each release's Kubernetes commands have a directory
of their own in the cache, so a lab at one release and extra kubelets of others live side by
side; etcd, crictl, containerd and toxiproxy do not depend on the release and are built once
for all. Shopify's toxiproxy is the TCP proxy the kubelets reach the API server through, so a
latency can be put on that path alone (`lab up --api-latency`; this kernel has no netem).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from abtest.config.domain import Release
from abtest.config.goarch import cache_suffix
from abtest.errors import LabError
from abtest.lab.build_lock import build_lock
from abtest.lab.build_progress import BuildProgress
from abtest.lab.releases import DEFAULT_RELEASE

ETCD_VERSION = "v3.6.16"
CRI_TOOLS_VERSION = "v1.34.0"
CONTAINERD_VERSION = "v1.7.28"
TOXIPROXY_VERSION = "v2.5.0"
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2"
#: the lab's name for toxiproxy's server command (the module builds it as cmd/server)
TOXIPROXY = "toxiproxy-server"
# The commit of the v1.7.28 tag (the module proxy's .info names it): stamped like upstream's
# release build, so `containerd --version` and the CRI Version call say what a release says.
CONTAINERD_REVISION = "b98a3aace656320842a23f4a392a33f46af97866"
CONTAINERD_MODULE = "github.com/containerd/containerd"
KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet")
# containerd's shim and ctr come from the same module and build step: the lab's containerd
# must never run another containerd's shim (containerd_path.containerd_env), and the lab imports
# its images with its own ctr.
CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
ALL_NAMES = (*KUBE_COMMANDS, "etcd", "crictl", *CONTAINERD_COMMANDS, TOXIPROXY)
# Snapshotters the lab never uses (it runs overlayfs): btrfs needs cgo, and the rest only
# add module downloads and build time. The same tags upstream's static builds accept.
CONTAINERD_TAGS = "no_btrfs no_devmapper no_zfs no_aufs"


def version_of(name: str, release: Release) -> str:
    """The version a binary of the lab is built at: etcd, crictl, containerd and toxiproxy
    have their own, the Kubernetes commands the release's."""
    if name == TOXIPROXY:
        return TOXIPROXY_VERSION
    if name == "etcd":
        return ETCD_VERSION
    if name == "crictl":
        return CRI_TOOLS_VERSION
    if name in CONTAINERD_COMMANDS:
        return CONTAINERD_VERSION
    return release.version


def build_steps(missing: Sequence[str]) -> list[str]:
    """The build steps for these missing binaries, in build order: one per Kubernetes command,
    etcd and crictl, and one step for all of containerd's commands (they share a module and
    most compiled packages, so building one of them is most of the cost of all three)."""
    steps = [n for n in (*KUBE_COMMANDS, "etcd", "crictl") if n in missing]
    if any(n in missing for n in CONTAINERD_COMMANDS):
        steps.append("containerd")
    if TOXIPROXY in missing:
        steps.append(TOXIPROXY)
    return steps


def containerd_ldflags() -> str:
    pkg = f"{CONTAINERD_MODULE}/version"
    return " ".join(
        [
            "-s",
            "-w",
            f"-X {pkg}.Version={CONTAINERD_VERSION}",
            f"-X {pkg}.Revision={CONTAINERD_REVISION}",
            f"-X {pkg}.Package={CONTAINERD_MODULE}",
        ]
    )


def ldflags(release: Release, version: str | None = None) -> str:
    """Stamp the release version the way upstream's build does, so nodeInfo.kubeletVersion
    and /version report the release instead of v0.0.0-master; a patched build stamps its
    build name (``v1.36.3+agc``: semver build metadata) as ``version``."""
    version = version or release.version
    return " ".join(
        ["-s", "-w"]
        + [
            f"-X {pkg}.{var}"
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
            for var in (
                f"gitVersion={version}",
                f"gitMajor={release.major}",
                f"gitMinor={release.minor}",
                "gitTreeState=clean",
                "buildDate=1970-01-01T00:00:00Z",
            )
        ]
    )


@dataclass(frozen=True)
class BinarySet:
    """One release's binaries in the cache; ``names`` are the ones this set must hold (the
    whole lab, or only a kubelet placed on a node as an arm)."""

    directory: Path
    release: Release
    names: tuple[str, ...] = ALL_NAMES
    #: the GOARCH the set is built for (None: the controller's own)
    goarch: str | None = None

    def path(self, name: str) -> Path:
        if name in KUBE_COMMANDS:
            return self.directory / name
        group = "containerd" if name in CONTAINERD_COMMANDS else name
        return self.directory.parent / f"{group}-{version_of(name, self.release)}" / name

    def missing(self) -> list[str]:
        return [n for n in self.names if not os.access(self.path(n), os.X_OK)]


def cache_root() -> Path:
    base = os.environ.get("ABTEST_CACHE") or os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "abtest"


def binary_set(
    release: Release = DEFAULT_RELEASE,
    names: Sequence[str] = ALL_NAMES,
    goarch: str | None = None,
) -> BinarySet:
    """A release's binaries in the cache, for ``goarch`` (None or the controller's own: the
    directory every earlier build used; another: its own directory, ``..._r3-arm64``)."""
    suffix = cache_suffix(goarch)
    directory = cache_root() / "bin" / f"k8s-{release.version}_r3{suffix}"
    return BinarySet(directory, release, tuple(names), goarch if suffix else None)


def ensure_binaries(
    say: object = print,
    live: bool | None = None,
    release: Release = DEFAULT_RELEASE,
    names: Sequence[str] = ALL_NAMES,
    goarch: str | None = None,
) -> BinarySet:
    """Build whatever is missing from the cache; a no-op when everything is there.

    A first build takes many minutes: each step shows its elapsed time and an estimate of the
    rest (live on a terminal, a line every half minute otherwise; ``live`` forces either),
    and the end says what was built and where it is cached."""
    bins = binary_set(release, names, goarch)
    if bins.goarch is not None and set(names) - set(KUBE_COMMANDS):
        raise LabError(f"only Kubernetes commands are built for another GOARCH ({bins.goarch})")
    if not bins.missing():
        return bins
    if shutil.which("go") is None:
        raise LabError("the Go toolchain is needed to build the lab binaries; install Go >= 1.24")
    emit: Callable[[str], None] = say if callable(say) else print
    with build_lock(cache_root(), emit):
        missing = bins.missing()  # again: the build waited for may have made them
        if missing:
            _build_missing(bins, missing, emit, live, release)
    return bins


def _build_missing(
    bins: BinarySet,
    missing: list[str],
    emit: Callable[[str], None],
    live: bool | None,
    release: Release,
) -> None:
    for name in missing:
        bins.path(name).parent.mkdir(parents=True, exist_ok=True)
    emit(
        "building "
        + ", ".join(f"{n} {version_of(n, release)}" for n in missing)
        + f" into {bins.directory.parent} (once: later `lab up`s reuse them)"
    )
    kube = [m for m in missing if m in KUBE_COMMANDS]
    modules = _modules_to_fetch(release, kube, missing)
    progress = BuildProgress.for_steps(
        (["modules"] if modules else []) + build_steps(missing),
        emit,
        cache_root() / "build-times.json",
        live,
        what=f"k8s {release.version}" if kube else "",
    )
    with progress.display():
        if modules:
            with progress.step("modules"):
                dirs = _module_dirs(release, kube, missing, progress)
        else:
            dirs = _module_dirs(release, kube, missing, progress)
        for name in kube:
            with progress.step(name):
                go_build(
                    dirs["kube"],
                    f"k8s.io/kubernetes/cmd/{name}",
                    bins.path(name),
                    progress,
                    ldflags(release),
                    goarch=bins.goarch,
                )
        if "etcd" in missing:
            with progress.step("etcd"):
                go_build(dirs["etcd"], "go.etcd.io/etcd/server/v3", bins.path("etcd"), progress)
        if "crictl" in missing:
            with progress.step("crictl"):
                go_build(
                    dirs["crictl"],
                    "sigs.k8s.io/cri-tools/cmd/crictl",
                    bins.path("crictl"),
                    progress,
                )
        if "containerd" in build_steps(missing):
            with progress.step("containerd"):
                for name in CONTAINERD_COMMANDS:
                    if name in missing:
                        go_build(
                            dirs["containerd"],
                            f"{CONTAINERD_MODULE}/cmd/{name}",
                            bins.path(name),
                            progress,
                            containerd_ldflags(),
                            tags=CONTAINERD_TAGS,
                        )
        if TOXIPROXY in missing:
            with progress.step(TOXIPROXY):
                go_build(
                    dirs[TOXIPROXY],
                    f"{TOXIPROXY_MODULE}/cmd/server",
                    bins.path(TOXIPROXY),
                    progress,
                )
    still = bins.missing()
    if still:
        raise LabError(f"build finished but {', '.join(still)} is missing in {bins.directory}")
    for line in progress.summary(_cached_in(bins, missing), missing, cache_root() / "build"):
        emit(line)


def _cached_in(bins: BinarySet, built: Sequence[str]) -> Path:
    """The one cache directory the built binaries are in, else the directory of them all."""
    dirs = {bins.path(n).parent for n in built}
    return dirs.pop() if len(dirs) == 1 else bins.directory.parent


def _modules_to_fetch(release: Release, kube: list[str], missing: list[str]) -> bool:
    """Are module downloads still to do (a build directory without its go.sum)?"""
    wanted = [f"k8s-{release.version}"] if kube else []
    wanted += [f"etcd-{ETCD_VERSION}"] if "etcd" in missing else []
    wanted += [f"crictl-{CRI_TOOLS_VERSION}"] if "crictl" in missing else []
    wanted += [f"containerd-{CONTAINERD_VERSION}"] if "containerd" in build_steps(missing) else []
    wanted += [f"toxiproxy-{TOXIPROXY_VERSION}"] if TOXIPROXY in missing else []
    return any(not (cache_root() / "build" / w / "go.sum").exists() for w in wanted)


def _module_dirs(
    release: Release, kube: list[str], missing: list[str], progress: BuildProgress
) -> dict[str, Path]:
    dirs: dict[str, Path] = {}
    if kube:
        dirs["kube"] = kubernetes_module(release, kube, progress)
    if "etcd" in missing:
        dirs["etcd"] = _simple_module("etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION, progress)
    if "crictl" in missing:
        dirs["crictl"] = _simple_module(
            "crictl", "sigs.k8s.io/cri-tools", CRI_TOOLS_VERSION, progress
        )
    if "containerd" in build_steps(missing):
        # `go install ...@v1.7.28` is refused (containerd's go.mod has `exclude` directives,
        # which only a main module may have): a throwaway module that requires it builds it.
        # Its cmd packages are fetched by name so go.sum covers all three commands.
        dirs["containerd"] = _simple_module(
            "containerd",
            CONTAINERD_MODULE,
            CONTAINERD_VERSION,
            progress,
            [f"{CONTAINERD_MODULE}/cmd/{c}" for c in CONTAINERD_COMMANDS],
            CONTAINERD_TAGS,
        )
    if TOXIPROXY in missing:
        dirs[TOXIPROXY] = _simple_module(
            "toxiproxy",
            TOXIPROXY_MODULE,
            TOXIPROXY_VERSION,
            progress,
            [f"{TOXIPROXY_MODULE}/cmd/server"],
        )
    return dirs


def build_dir(name: str) -> Path:
    path = cache_root() / "build" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_go(args: list[str], cwd: Path, progress: BuildProgress, goarch: str | None = None) -> str:
    """Run ``go`` with cgo off (static binaries, and what lets an amd64 controller build an
    arm64 kubelet with no C cross-compiler); ``goarch``: build for that architecture."""
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    if goarch is not None:
        env["GOARCH"] = goarch
    code, output = progress.call(["go", *args], cwd, env)
    if code != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise LabError(f"`go {' '.join(args)}` failed in {cwd}:\n{tail}")
    return output


def kubernetes_module(release: Release, kube: list[str], progress: BuildProgress) -> Path:
    version = release.version
    workdir = build_dir(f"k8s-{version}")
    go_mod = workdir / "go.mod"
    if not (workdir / "go.sum").exists():
        upstream_mod = run_go(
            ["mod", "download", "-json", f"k8s.io/kubernetes@{version}"], workdir, progress
        )
        found = re.search(r'"GoMod":\s*"([^"]+)"', upstream_mod)
        if found is None:
            raise LabError(f"`go mod download k8s.io/kubernetes@{version}` named no go.mod")
        mod_path = Path(found.group(1))
        staging = re.findall(r"^\s*(k8s\.io/\S+)\s+=>\s+\./staging/", mod_path.read_text(), re.M)
        if not staging:
            raise LabError(f"no staging replaces found in {mod_path}")
        lines = [
            "module abtest.local/k8sbuild",
            "",
            "go 1.24",
            "",
            f"require k8s.io/kubernetes {version}",
            "",
            "replace (",
            *[f"\t{m} => {m} {release.staging}" for m in staging],
            ")",
            "",
        ]
        go_mod.write_text("\n".join(lines))
        # Every command's packages, whichever are built now: a later build of the rest of
        # the release (a kubelet placed first, the whole lab later) finds go.sum complete.
        run_go(
            ["get", *[f"k8s.io/kubernetes/cmd/{c}@{version}" for c in KUBE_COMMANDS]],
            workdir,
            progress,
        )
    return workdir


def _simple_module(
    name: str,
    module: str,
    version: str,
    progress: BuildProgress,
    packages: Sequence[str] = (),
    tags: str = "",
) -> Path:
    workdir = build_dir(f"{name}-{version}")
    if not (workdir / "go.sum").exists():
        (workdir / "go.mod").write_text(
            f"module abtest.local/{name}build\n\ngo 1.24\n\nrequire {module} {version}\n"
        )
        wanted = [f"{p}@{version}" for p in packages or (module,)]
        run_go(["get", *([f"-tags={tags}"] if tags else []), *wanted], workdir, progress)
    return workdir


def go_build_args(package: str, out: Path, flags: str = "-s -w", tags: str = "") -> list[str]:
    return [
        "build",
        "-trimpath",
        *([f"-tags={tags}"] if tags else []),
        f"-ldflags={flags}",
        "-o",
        str(out),
        package,
    ]


def go_build(
    workdir: Path,
    package: str,
    out: Path,
    progress: BuildProgress,
    flags: str = "-s -w",
    tags: str = "",
    goarch: str | None = None,
) -> None:
    tmp = out.with_suffix(".tmp")
    run_go(go_build_args(package, tmp, flags, tags), workdir, progress, goarch)
    tmp.replace(out)
