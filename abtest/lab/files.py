"""How the lab writes files: private from the first byte, replaced atomically.

A key or kubeconfig written with default permissions and chmod'ed afterwards is readable
by anyone for that moment, and a directory created 0755 lets anyone list (and, for files
with default modes, read) what lands in it. So every directory is created with its final
mode and every file is created by `os.open` with its final mode in a temp file next to
the target, then renamed over it: a reader sees the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
PUBLIC_FILE = 0o644


def make_dir(path: Path, mode: int = PRIVATE_DIR) -> Path:
    """Create `path` (and missing parents) with `mode` from the start.

    An existing directory left by an older lab with a looser mode is tightened to `mode`
    (never loosened beyond what it had: only permission bits outside `mode` are removed)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by someone else: checked below
            os.mkdir(d, mode)
        # mkdir's mode is filtered by the umask, which can only have removed bits.
    st = path.stat()
    if st.st_mode & 0o777 & ~mode:
        os.chmod(path, st.st_mode & 0o777 & mode)
    return path


def write_file(path: Path, data: bytes | str, mode: int = PRIVATE_FILE) -> Path:
    """Write `data` to `path` atomically, the file carrying `mode` from its creation."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        # The umask may have removed bits a public file needs; the file is still empty.
        os.fchmod(fd, mode)
        _write_all(fd, raw)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _write_all(fd: int, raw: bytes) -> None:
    view = memoryview(raw)
    while view:
        view = view[os.write(fd, view) :]


def replace_system_file(path: Path, text: str) -> str:
    """Replace a system file such as /etc/hosts atomically, keeping its owner and mode.

    Returns "renamed", or "in place" when the file is a mount point: in a container
    /etc/hosts is usually a bind mount from the runtime, and rename(2) over a mount point
    fails with EBUSY. Then the only way to change it is to rewrite the mounted file itself;
    the full new content is written in one write and fsynced, which is as close to atomic
    as that file allows."""
    st = path.stat()
    tmp = path.with_name(f".{path.name}.abtest-{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchown(fd, st.st_uid, st.st_gid)
        os.fchmod(fd, st.st_mode & 0o7777)
        _write_all(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
        return "renamed"
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno not in (errno.EBUSY, errno.EXDEV):
            raise
    with path.open("r+b") as fh:
        fh.write(text.encode())
        fh.truncate()
        fh.flush()
        os.fsync(fh.fileno())
    return "in place"


def install_binary(src: Path, dst: Path) -> None:
    """Copy a binary into place (through a hidden temp file beside it and a rename), unless
    one of the same size and mtime is there already."""
    if dst.exists() and (dst.stat().st_size, dst.stat().st_mtime) == (
        src.stat().st_size,
        src.stat().st_mtime,
    ):
        return
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copy2(src, tmp)
    tmp.replace(dst)
