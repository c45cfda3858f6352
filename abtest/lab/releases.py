"""Which Kubernetes release the lab runs, and whether the Go module proxy serves it.

A release is named as upstream tags it (``v1.36.3``); :func:`abtest.config.domain.parse_release`
checks the name and the lab's minimum, :func:`served` asks the proxy before anything is
built.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from abtest.config.domain import Release

#: the newest release where PLEGOnDemandRelist (upstream since v1.36, GA and locked on in
#: v1.37) can be switched both ways: the lab's default
DEFAULT_RELEASE = Release(1, 36, 3)


def served(release: Release) -> str | None:
    """Why the Go module proxy cannot give this release (None when it can, or when there is no
    Go toolchain to ask: the build then says so itself)."""
    if shutil.which("go") is None:
        return None
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    try:
        done = subprocess.run(
            ["go", "list", "-m", "-json", f"k8s.io/kubernetes@{release.version}"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd="/",
            check=False,
        )
    except subprocess.TimeoutExpired:
        return (
            f"the Go module proxy did not answer for k8s.io/kubernetes@{release.version} in 120 s"
        )
    if done.returncode == 0:
        return None
    last = " ".join((done.stderr.strip().splitlines() or ["(no output)"])[-1].split())
    return f"the Go module proxy does not serve k8s.io/kubernetes@{release.version}: {last}"
