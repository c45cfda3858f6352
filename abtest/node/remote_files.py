"""Files on the node: stat, read, and atomic replace that keeps owner and mode.

The new bytes travel by SFTP into a private temp file the SSH user owns (mktemp, 0600),
then one small script - with sudo when the profile says - copies it next to the target
(same directory, so the rename is atomic), sets the target's owner and mode, fsyncs it,
renames it over the target and fsyncs the directory. The result is read back and its
sha256 compared; a mismatch is an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import secrets

from abtest.errors import NodeError
from abtest.node.ssh import Connection, FileStat

_WRITE_SCRIPT = r"""
set -eu
src=$1 tmp=$2 dst=$3 owner=$4 mode=$5
trap 'rm -f -- "$tmp"' EXIT
cp -- "$src" "$tmp"
chown -- "$owner" "$tmp"
chmod -- "$mode" "$tmp"
sync -- "$tmp" 2>/dev/null || sync
mv -f -- "$tmp" "$dst"
sync -- "$(dirname -- "$dst")" 2>/dev/null || sync
"""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def realpath(conn: Connection, path: str, *, sudo: bool) -> str:
    """The file ``path`` names, symlinks resolved (so a rename replaces the real file)."""
    res = conn.run(["readlink", "-f", "--", path], sudo=sudo, timeout=20)
    res.check(f"resolving {path}")
    resolved = res.stdout.strip()
    return resolved or path


def stat_file(conn: Connection, path: str, *, sudo: bool) -> FileStat | None:
    """Owner, mode and size of ``path``; None if it does not exist."""
    try:
        return conn.stat(path)
    except NodeError:
        if not sudo:
            raise
    script = '[ -e "$1" ] || exit 3; stat -L -c "%s %a %u %g" -- "$1"'
    res = conn.run(["sh", "-c", script, "abtest-stat", path], sudo=True, timeout=20)
    if res.rc == 3:
        return None
    res.check(f"stat {path}")
    size, mode, uid, gid = res.stdout.split()
    return FileStat(size=int(size), mode=int(mode, 8), uid=int(uid), gid=int(gid))


def exists(conn: Connection, path: str, *, sudo: bool) -> bool:
    return stat_file(conn, path, sudo=sudo) is not None


def read_file(conn: Connection, path: str, *, sudo: bool) -> bytes:
    return conn.read_bytes(path, sudo=sudo)


def atomic_write(
    conn: Connection,
    path: str,
    data: bytes,
    *,
    sudo: bool,
    like: FileStat | None = None,
) -> str:
    """Replace ``path`` with ``data`` atomically; returns the sha256 written.

    Owner and mode are the current file's, else ``like``'s, else the SSH user's with 0600.
    """
    current = stat_file(conn, path, sudo=sudo)
    model = current or like
    tmp_src = conn.run(["mktemp", "/tmp/abtest-upload.XXXXXXXXXX"], timeout=20)
    src = tmp_src.check("creating an upload temp file").stdout.strip()
    if not src.startswith("/tmp/abtest-upload."):
        raise NodeError(f"mktemp gave an unexpected name {src!r}")
    try:
        conn.write_bytes(src, data, mode=0o600)
        directory, name = posixpath.split(path)
        tmp_dst = posixpath.join(directory, f".{name}.abtest-{secrets.token_hex(4)}.tmp")
        if model is not None:
            owner, mode = f"{model.uid}:{model.gid}", f"{model.mode:o}"
        else:
            ids = conn.run(["sh", "-c", "echo $(id -u):$(id -g)"], timeout=20).check("id")
            owner, mode = ids.stdout.strip(), "600"
        argv = ["sh", "-c", _WRITE_SCRIPT, "abtest-write", src, tmp_dst, path, owner, mode]
        conn.run(argv, sudo=sudo, timeout=60).check(f"writing {path}")
    finally:
        # a leftover 0600 temp file in /tmp is not worth masking the real error
        with contextlib.suppress(NodeError):
            conn.run(["rm", "-f", "--", src], timeout=20)
    written = conn.read_bytes(path, sudo=sudo)
    if written != data:
        raise NodeError(
            f"{path}: read back {sha256(written)[:12]} after writing {sha256(data)[:12]}"
        )
    return sha256(data)


def remove(conn: Connection, path: str, *, sudo: bool) -> None:
    conn.run(["rm", "-f", "--", path], sudo=sudo, timeout=20).check(f"removing {path}")
