"""containerd's PATH on a lab node: the lab's own binaries first, then the system's."""

from __future__ import annotations

import os
from pathlib import Path

# Where runc, crun, the CNI plugins' helpers and mount live on any Linux; kept on containerd's
# PATH even when the caller's PATH lacks them (a minimal sudo or CI environment).
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def containerd_path(bin_dir: Path, inherited: str | None) -> str:
    """containerd's PATH: the lab's binary directory first. containerd 1.7 runs the
    `containerd-shim-runc-v2` in its working directory, else the first on its PATH, and
    looks in its own directory only when PATH has none: with Debian's containerd installed
    its 1.6 shim (/usr/bin) would run the lab's pods unless the lab's own shim comes first.
    The lab also starts containerd in that directory (Containerd.argv). The shim inherits this
    PATH and finds `runc` on it (the runc handler names no binary)."""
    first = str(bin_dir)
    rest = [p for p in (inherited or "").split(os.pathsep) if p and p != first]
    rest += [p for p in SYSTEM_PATH if p not in rest]
    return os.pathsep.join([first, *rest])


def containerd_env(bin_dir: Path) -> dict[str, str]:
    return {"PATH": containerd_path(bin_dir, os.environ.get("PATH"))}
