"""Which Kubernetes release the lab runs, and whether the Go module proxy serves it.

A release is named as upstream tags it (``v1.36.3``); :func:`abtest.config.domain.parse_release`
checks the name and the lab's minimum, :func:`served` asks the proxy before anything is
built. :func:`choose_release` decides which release an `up` runs, from the kept lab state's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from abtest.config.domain import MINIMUM, Release, parse_release
from abtest.errors import UserError
from abtest.lab.layout import LabState, Paths, Say

#: the newest release where PLEGOnDemandRelist (upstream since v1.36, GA and locked on in
#: v1.37) can be switched both ways: the lab's default
DEFAULT_RELEASE = Release(1, 36, 3)


def served(release: Release) -> str | None:
    """Why the Go module proxy cannot give this release (None when it can, or when there is no
    Go toolchain to ask: the build then says so itself)."""
    if shutil.which("go") is None:
        return None
    done = _go_list(["-json", f"k8s.io/kubernetes@{release.version}"])
    if done is None:
        return (
            f"the Go module proxy did not answer for k8s.io/kubernetes@{release.version} in 120 s"
        )
    if done.returncode == 0:
        return None
    last = " ".join((done.stderr.strip().splitlines() or ["(no output)"])[-1].split())
    return f"the Go module proxy does not serve k8s.io/kubernetes@{release.version}: {last}"


#: what a lab state from before releases were recorded ran
UNRECORDED_RELEASE = Release(1, 34, 4)


def kept_release(paths: Paths) -> Release | None:
    """The release of the kept lab state (None: no state, a fresh lab)."""
    state = LabState.load(paths)
    if state is None:
        return None
    return (
        parse_release(state.kubernetes, str(paths.state_file))
        if state.kubernetes
        else (UNRECORDED_RELEASE)
    )


def choose_release(paths: Paths, wanted: Release | None, running: bool, say: Say) -> Release:
    """The release this `up` runs, decided before anything is built or touched.

    No --kubernetes: the kept lab's release (never a silent upgrade), else the default. A
    running lab changes release only through `down`. A kept (stopped) lab moves to a newer
    release with its state (the new API server reads the older etcd data; each node's kubelet
    config is kept as it is, since an experiment's journaled change may be in it); to an older
    minor only from a fresh state directory (`down --purge`): an older API server may not read
    what a newer one stored."""
    kept = kept_release(paths)
    target = wanted or kept or DEFAULT_RELEASE
    if kept is None or kept == target:
        return target
    if running:
        raise UserError(
            f"the lab is up at {kept}; it cannot change to {target} while it runs",
            "--kubernetes",
            f"run `abtest lab down`, then `abtest lab up --kubernetes {target}`",
        )
    if (target.major, target.minor) < (kept.major, kept.minor):
        raise UserError(
            f"the kept lab state was written by {kept}; {target} is an older minor, and an "
            "older API server may not read what a newer one stored in etcd",
            "--kubernetes",
            f"run `abtest lab down --purge` (deletes {paths.root}: etcd data, certificates, "
            f"kubelet configs) and then `abtest lab up --kubernetes {target}`",
        )
    say(
        f"moving the kept lab from {kept} to {target}: etcd data kept (the {target} API "
        "server reads it), each node's kubelet config kept as it is, extra kubelet releases "
        f"in {paths.kubelets} kept; `abtest lab down --purge` first for a fresh lab"
    )
    return target


_STABLE = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


def releases_between(listed: str, good: Release, bad: Release) -> list[Release]:
    """The final releases in ``listed`` (``go list -m -versions``: the module path, then its
    versions) from ``good`` to ``bad`` inclusive, oldest first by semver; pre-releases
    (-alpha, -beta, -rc) and anything the lab's minimum refuses are left out."""
    found: set[Release] = set()
    for word in listed.split()[1:]:
        match = _STABLE.fullmatch(word)
        if match is None:
            continue
        release = Release(int(match[1]), int(match[2]), int(match[3]))
        if (release.major, release.minor) < MINIMUM:
            continue
        if _key(good) <= _key(release) <= _key(bad):
            found.add(release)
    return sorted(found, key=_key)


def _key(release: Release) -> tuple[int, int, int]:
    return (release.major, release.minor, release.patch)


def served_releases(good: Release, bad: Release) -> list[Release]:
    """The final k8s.io/kubernetes releases the Go module proxy serves from ``good`` to
    ``bad``, oldest first (what `abtest lab up --kubernetes` and `lab kubelets` can build)."""
    if shutil.which("go") is None:
        raise UserError(
            "listing the releases between two builds needs Go (the Go module proxy)",
            "abtest bisect",
            "install Go, or name the builds with --builds B1,B2,...",
        )
    done = _go_list(["-versions", "k8s.io/kubernetes"])
    if done is None or done.returncode != 0:
        why = "no answer in 120 s" if done is None else " ".join(done.stderr.split())[-200:]
        raise UserError(
            f"the Go module proxy did not list k8s.io/kubernetes ({why})",
            "abtest bisect",
            "check GOPROXY, or name the builds with --builds B1,B2,...",
        )
    return releases_between(done.stdout, good, bad)


def _go_list(args: list[str]) -> subprocess.CompletedProcess[str] | None:
    """``go list -m ARGS`` through the Go module proxy (None: no answer in 120 s)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    try:
        return subprocess.run(
            ["go", "list", "-m", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd="/",
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
