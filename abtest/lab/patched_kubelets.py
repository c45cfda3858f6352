"""Kubelets of a release plus a patch series (``v1.36.3+agc``), built from the Go module proxy.

The release's module source (``k8s.io/kubernetes@vX.Y.Z`` in the Go module cache) is copied to
a work tree, the series' patches are read and checked again (the text checked is the text
applied) and applied to the copy in order with ``git apply`` (its own safety on, none of the
user's git config; each checked first: a patch that does not apply stops everything, naming
its first failing hunk),
and the kubelet is built from the copy through the release's throwaway module (the staging
modules pinned as for the upstream build) with ``k8s.io/kubernetes`` replaced by the copy.
``-trimpath`` keeps the Go build cache valid across copies, so a rebuild after one patch
changed compiles only the packages that patch reaches.

The binary is stamped with the build's name (``kubelet --version`` and the node's
``nodeInfo.kubeletVersion`` say ``v1.36.3+agc``) and cached by the series' content digest: an
unchanged series is never rebuilt, a changed patch always is. Beside it, ``source.json`` records
what it was built from (release, series, every patch's sha256); placing the build copies both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from abtest.config.goarch import cache_suffix
from abtest.config.kubelet_series import PatchSeries, checked_again, gate_clashes, upstream_gates
from abtest.config.series_patches import Patch
from abtest.errors import LabError, UserError
from abtest.lab.binaries import (
    build_dir,
    cache_root,
    go_build,
    kubernetes_module,
    ldflags,
    run_go,
)
from abtest.lab.build_lock import build_lock
from abtest.lab.build_progress import BuildProgress

SOURCE_FILE = "source.json"
_FAILED_HUNK = re.compile(r"^error: patch failed: (\S+):(\d+)$", re.M)
_ERROR = re.compile(r"^error: (.+)$", re.M)


def build_name(series: PatchSeries) -> str:
    return f"{series.release}+{series.name}"


def cached_dir(series: PatchSeries, goarch: str | None = None) -> Path:
    """Where this exact series' kubelet is cached: by build name and content digest (and the
    GOARCH when it is not the controller's own: :func:`abtest.config.goarch.cache_suffix`)."""
    key = f"kubelet-{build_name(series)}-{series.digest[:16]}{cache_suffix(goarch)}"
    return cache_root() / "bin" / key


def is_built(series: PatchSeries, goarch: str | None = None) -> bool:
    d = cached_dir(series, goarch)
    return os.access(d / "kubelet", os.X_OK) and (d / SOURCE_FILE).is_file()


def ensure_patched_kubelet(
    series: PatchSeries,
    say: Callable[[str], None] = print,
    live: bool | None = None,
    goarch: str | None = None,
) -> Path:
    """The cached directory holding this series' kubelet and source.json (built if missing)."""
    out = cached_dir(series, goarch)
    if is_built(series, goarch):
        return out
    if shutil.which("go") is None or shutil.which("git") is None:
        raise LabError("building a patched kubelet needs Go (>= 1.24) and git on this machine")
    with build_lock(cache_root(), say):
        if not is_built(series, goarch):  # again: the build waited for may have made it
            _build_patched(series, out, say, live, goarch if cache_suffix(goarch) else None)
    return out


def _build_patched(
    series: PatchSeries,
    out: Path,
    say: Callable[[str], None],
    live: bool | None,
    goarch: str | None = None,
) -> None:
    name = build_name(series)
    say(f"building kubelet {name} ({len(series.patches)} patches) into {out}")
    progress = _progress(["kubelet+series"], say, live, name)
    with progress.display():
        base, tree = _patched_source(series, progress)
        with progress.step("kubelet+series"):
            module = _series_module(series, base, tree)
            out.mkdir(parents=True, exist_ok=True)
            go_build(
                module,
                "k8s.io/kubernetes/cmd/kubelet",
                out / "kubelet",
                progress,
                ldflags(series.release, name),
                goarch=goarch,
            )
    record = {"build": name, **series.to_dict(), "go": _go_version()}
    tmp = out / f".{SOURCE_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out / SOURCE_FILE)
    for line in progress.summary(out, ["kubelet"], cache_root() / "build"):
        say(line)


def go_test_series(
    series: PatchSeries, say: Callable[[str], None] = print, live: bool | None = None
) -> list[str]:
    """The series' own checks on its patched source: gofmt of every Go file it touches, then
    `go vet` and `go test` of every package it touches. Returns go test's per-package lines
    (``ok k8s.io/kubernetes/pkg/kubelet/status 12.3s``); a failure is a LabError with the tail."""
    if shutil.which("go") is None or shutil.which("git") is None:
        raise LabError("testing a patch series needs Go (>= 1.24) and git on this machine")
    go_files = sorted({f for p in series.patches for f in p.files if f.endswith(".go")})
    packages = sorted({"k8s.io/kubernetes/" + str(Path(f).parent) for f in go_files})
    progress = _progress(["go vet", "go test"], say, live, build_name(series))
    with build_lock(cache_root(), say), progress.display():
        base, tree = _patched_source(series, progress)
        module = _series_module(series, base, tree)
        present = [f for f in go_files if (tree / f).is_file()]
        unformatted = run_go_tool(["gofmt", "-l", *present], tree)
        if unformatted.strip():
            raise LabError(f"gofmt: not formatted: {' '.join(unformatted.split())}")
        with progress.step("go vet"):
            run_go(["vet", "-trimpath", *packages], module, progress)
        with progress.step("go test"):
            out = run_go(["test", "-trimpath", "-count=1", *packages], module, progress)
    return [line for line in out.splitlines() if line.startswith(("ok ", "ok\t", "---", "FAIL"))]


def _progress(
    steps: list[str], say: Callable[[str], None], live: bool | None, what: str
) -> BuildProgress:
    return BuildProgress.for_steps(
        ["modules", "patches", *steps], say, cache_root() / "build-times.json", live, what
    )


def _patched_source(series: PatchSeries, progress: BuildProgress) -> tuple[Path, Path]:
    """The release's throwaway module (its go.mod pins the staging modules) and a patched
    copy of its source: the "modules" and "patches" steps."""
    with progress.step("modules"):
        base = kubernetes_module(series.release, ["kubelet"], progress)
        source = _module_source(series, base, progress)
    with progress.step("patches"):
        tree = patched_tree(series, source)
    return base, tree


def run_go_tool(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"`{argv[0]}` failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def _module_source(series: PatchSeries, base: Path, progress: BuildProgress) -> Path:
    """The release's k8s.io/kubernetes source in the Go module cache (read-only)."""
    listed = run_go(
        ["mod", "download", "-json", f"k8s.io/kubernetes@{series.release}"], base, progress
    )
    found = re.search(r'"Dir":\s*"([^"]+)"', listed)
    if found is None or not Path(found.group(1)).is_dir():
        raise LabError(f"`go mod download k8s.io/kubernetes@{series.release}` named no source")
    return Path(found.group(1))


def patched_tree(series: PatchSeries, source: Path) -> Path:
    """A writable copy of the release's source with every patch applied, in order; a patch
    the series check refuses (read again here: git applies the text checked, not the file as
    it is later), a clash with an upstream gate or a patch that does not apply is one
    UserError, nothing built. Nothing outside the copy is read or written."""
    patches = checked_again(series)
    features = source / "pkg" / "features" / "kube_features.go"
    clashes = gate_clashes(series, upstream_gates(features.read_text()))
    if clashes:
        raise UserError(
            clashes[0],
            str(series.folder),
            "rename the gate: a series may not re-register one of the release's own gates",
        )
    tree = build_dir(f"src-{build_name(series)}")
    shutil.rmtree(tree)
    shutil.copytree(source, tree, symlinks=True, copy_function=shutil.copyfile)
    for root, dirs, _files in os.walk(tree):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    for patch in patches:
        _refuse_linked_paths(tree, patch, series)
        git_apply(patch.text, tree, series.folder / patch.file, series)
    return tree


def _refuse_linked_paths(tree: Path, patch: Patch, series: PatchSeries) -> None:
    """No path the patch reads or writes passes through (or is) a symlink in the copy: git
    refuses to write beyond one too, but this says which patch, line and link."""
    for change in patch.changes:
        for path in dict.fromkeys(p for p in (change.old, change.new) if p is not None):
            at = tree
            for part in path.split("/"):
                at = at / part
                if at.is_symlink():
                    raise UserError(
                        f"series {series.name}: {path!r} passes through the symlink "
                        f"{str(at.relative_to(tree))!r} in the release's source",
                        f"{series.folder / patch.file} line {change.line}",
                        "a series may change only regular files inside the source tree",
                    )


def git_apply(text: str, tree: Path, where: Path, series: PatchSeries) -> None:
    """Apply one patch's text (given on stdin) to the work tree, checked whole first.

    git's own safety stays on: no ``--unsafe-paths`` (a path outside the tree, with ``..`` or
    under ``.git`` is refused), no ``--reject`` (a patch applies whole or not at all), ``-p1``
    explicit (git guesses nothing for a plain diff). ``core.symlinks=false`` writes a symlink
    a patch might still create as a plain file. git sees no repository above the tree, no
    system or user config and no system attributes, so no hook, filter or alias of the
    user's runs while a series is applied."""
    argv = [
        "git",
        *("-c", "core.symlinks=false", "-c", "core.protectNTFS=true", "-c", "core.protectHFS=true"),
        "apply",
        "-p1",
        "--whitespace=nowarn",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {
        "GIT_CEILING_DIRECTORIES": str(tree.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
    }
    for check in (True, False):
        done = subprocess.run(
            [*argv, *(["--check"] if check else []), "-"],
            cwd=tree,
            env=env,
            input=text.encode(),  # the checked bytes, whatever the locale's encoding
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            failure = _first_failure(done.stderr.decode(errors="replace"))
            raise UserError(
                f"does not apply to k8s.io/kubernetes {series.release}: {failure}",
                str(where),
                f"rebase the patch on {series.release} (patches apply in file-name order, each "
                "on top of the ones before it)",
            )


def _first_failure(stderr: str) -> str:
    hunk = _FAILED_HUNK.search(stderr)
    if hunk:
        return f"first failing hunk at {hunk.group(1)} line {hunk.group(2)}"
    other = _ERROR.search(stderr)
    if other:
        return other.group(1)
    return (stderr.strip().splitlines() or ["git apply failed"])[0]


def _series_module(series: PatchSeries, base: Path, tree: Path) -> Path:
    """The release's throwaway module with k8s.io/kubernetes replaced by the patched tree."""
    module = build_dir(f"k8s-{build_name(series)}")
    go_mod = (base / "go.mod").read_text()
    (module / "go.mod").write_text(
        go_mod.rstrip("\n") + f"\n\nreplace k8s.io/kubernetes => {tree}\n"
    )
    shutil.copyfile(base / "go.sum", module / "go.sum")
    return module


def _go_version() -> str:
    done = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=False)
    return done.stdout.strip()
