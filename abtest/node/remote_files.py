"""Files on the node: stat, read, and atomic replace that keeps owner and mode.

The new bytes travel by SFTP into a private temp file the SSH user owns (mktemp, 0600),
then one small script - with sudo when the profile says - copies it next to the target
(same directory, so the rename is atomic), sets the target's owner and mode, fsyncs it,
renames it over the target and fsyncs the directory. The result is read back and its
sha256 compared; a mismatch is an error. :func:`atomic_copy` runs the same script on a
file already on the node (the kubelet binary).

The script can check, just before the rename, that the target is still the bytes the
caller read (``expect_sha256``): someone else's edit is refused (:class:`ChangedUnderUs`),
never overwritten. The window between that check and the rename is one ``mv``.

A :class:`Marker` sits beside each node-side backup: which contents of the file are ours,
the original's sha256 (and owner and mode), and the lock token of the change, so that
``abtest node restore`` can check and undo the change with no local journal.
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import re
import secrets
from dataclasses import dataclass
from typing import NoReturn

from abtest.config.full_match import whole
from abtest.errors import NodeError, UserError
from abtest.node.connection import Connection, FileStat
from abtest.store.journal import CHANGED, Journal, JournalEntry

#: Exit status of the write script when the target is not the bytes the caller expected.
CHANGED_RC = 17
ABSENT = "absent"  # expect_sha256 for "the target must not exist yet"
MARKER_SUFFIX = ".marker"  # beside a backup: <file>.abtest-original.marker

# ``expect`` empty: no check. ``marker`` non-empty: that file gets ``marker_text`` (through
# its own temp file) before the rename, so a crash right after the rename still finds the
# new bytes listed as ours. HUP/INT/TERM (the SSH channel dropping) exit through the trap.
_WRITE_SCRIPT = r"""
set -eu
src=$1 tmp=$2 dst=$3 owner=$4 mode=$5 expect=$6 marker=$7 marker_text=$8
trap 'rm -f -- "$tmp" "$tmp.marker"' EXIT
trap 'exit 129' HUP INT TERM
cp -- "$src" "$tmp"
chown -- "$owner" "$tmp"
chmod -- "$mode" "$tmp"
sync -- "$tmp" 2>/dev/null || sync
if [ -n "$marker" ]; then
  printf '%s' "$marker_text" > "$tmp.marker"
  chmod 600 "$tmp.marker"
  sync -- "$tmp.marker" 2>/dev/null || sync
fi
if [ -n "$expect" ]; then
  if [ -e "$dst" ]; then have=$(sha256sum < "$dst"); have=${have%% *}; else have=absent; fi
  if [ "$have" != "$expect" ]; then
    echo "$have"
    exit 17  # CHANGED_RC
  fi
fi
[ -z "$marker" ] || mv -f -- "$tmp.marker" "$marker"
mv -f -- "$tmp" "$dst"
sync -- "$(dirname -- "$dst")" 2>/dev/null || sync
"""
_SHA = re.compile(r"[0-9a-f]{64}")


class ChangedUnderUs(UserError):
    """A file on the node is not the bytes we read or wrote: someone else changed it."""

    def __init__(
        self, what: str, where: str | None = None, todo: str | None = None, *, found: str = ""
    ) -> None:
        super().__init__(what, where, todo)
        self.found = found  # the sha256 the file has now ("absent" if it is gone)


def refuse_changed(
    journal: Journal, entry: JournalEntry, detail: str, *, node: str, profile: str, found: str
) -> NoReturn:
    """Someone else changed a file abtest changed: journal it (``CHANGED``), leave the file as
    found, say so (``detail``: what was found instead of what)."""
    journal.mark(entry.id, CHANGED, detail=detail)
    raise ChangedUnderUs(
        detail,
        f"node {node}",
        f"look at what changed it; `abtest node restore --profile {profile} --force` puts the "
        "original back over it",
        found=found,
    )


@dataclass(frozen=True)
class Marker:
    """Beside a node-side backup: which contents of the file are ours, and how to undo."""

    ours: tuple[str, ...]  # sha256 of every content we wrote (or are about to write)
    original_sha256: str
    lock_token: str | None = None
    owner: str | None = None  # uid:gid of the original (the binary's)
    mode: str | None = None  # octal permission bits of the original

    def render(self) -> str:
        lines = ["abtest-marker 1", f"original {self.original_sha256}"]
        lines += [f"ours {sha}" for sha in self.ours]
        for key, value in (
            ("lock_token", self.lock_token),
            ("owner", self.owner),
            ("mode", self.mode),
        ):
            if value:
                lines.append(f"{key} {value}")
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> Marker | None:
        """None for anything that is not a marker we wrote."""
        lines = [line.split(" ", 1) for line in text.splitlines() if line.strip()]
        if not lines or lines[0] != ["abtest-marker", "1"]:
            return None
        values: dict[str, str] = {}
        ours: list[str] = []
        for key, value in (pair for pair in lines[1:] if len(pair) == 2):
            if key == "ours":
                ours.append(value)
            else:
                values[key] = value
        original = values.get("original", "")
        if not whole(_SHA, original) or not all(whole(_SHA, s) for s in ours):
            return None
        return cls(
            tuple(ours),
            original,
            values.get("lock_token"),
            values.get("owner"),
            values.get("mode"),
        )

    def accepts(self, sha: str) -> bool:
        return sha == self.original_sha256 or sha in self.ours


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


def require_no_backup(
    conn: Connection, backup: str, *, sudo: bool, earlier: str, node: str, profile: str
) -> None:
    """Before a first change: a backup already at ``backup`` is ``earlier``'s original, which
    must not be overwritten with what may be that change."""
    if exists(conn, backup, sudo=sudo):
        raise UserError(
            f"{backup} is on the node: {earlier} may still be in effect; nothing was changed",
            f"node {node}",
            f"run `abtest node restore --profile {profile}` first",
        )


def read_file(conn: Connection, path: str, *, sudo: bool) -> bytes:
    return conn.read_bytes(path, sudo=sudo)


def atomic_write(
    conn: Connection,
    path: str,
    data: bytes,
    *,
    sudo: bool,
    like: FileStat | None = None,
    expect_sha256: str | None = None,
    marker: tuple[str, str] | None = None,
) -> str:
    """Replace ``path`` with ``data`` atomically; returns the sha256 written.

    Owner and mode are the current file's, else ``like``'s, else the SSH user's with 0600.
    ``expect_sha256``: refuse (:class:`ChangedUnderUs`, nothing written) unless the target
    has these bytes just before the rename (:data:`ABSENT`: does not exist).
    ``marker``: (path, text) written in the same step, just before the rename.
    """
    current = stat_file(conn, path, sudo=sudo)
    model = current or like
    tmp_src = conn.run(["mktemp", "/tmp/abtest-upload.XXXXXXXXXX"], timeout=20)
    src = tmp_src.check("creating an upload temp file").stdout.strip()
    if not src.startswith("/tmp/abtest-upload."):
        raise NodeError(f"mktemp gave an unexpected name {src!r}")
    try:
        conn.write_bytes(src, data, mode=0o600)
        if model is not None:
            owner, mode = f"{model.uid}:{model.gid}", f"{model.mode:o}"
        else:
            ids = conn.run(["sh", "-c", "echo $(id -u):$(id -g)"], timeout=20).check("id")
            owner, mode = ids.stdout.strip(), "600"
        _run_write(conn, src, path, owner, mode, sudo, expect_sha256, marker)
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


def atomic_copy(
    conn: Connection,
    source: str,
    path: str,
    *,
    owner: str,
    mode: int | str,
    sudo: bool,
    expect_sha256: str | None = None,
) -> None:
    """Copy ``source`` (a file on the node) over ``path`` through a temp file beside it,
    fsynced, with ``owner`` (uid:gid) and ``mode``; a failed copy leaves no temp file."""
    octal = mode if isinstance(mode, str) else f"{mode:o}"
    _run_write(conn, source, path, owner, octal, sudo, expect_sha256, None)


def _run_write(
    conn: Connection,
    src: str,
    path: str,
    owner: str,
    mode: str,
    sudo: bool,
    expect_sha256: str | None,
    marker: tuple[str, str] | None,
) -> None:
    directory, name = posixpath.split(path)
    tmp_dst = posixpath.join(directory, f".{name}.abtest-{secrets.token_hex(4)}.tmp")
    marker_path, marker_text = marker or ("", "")
    argv = ["sh", "-c", _WRITE_SCRIPT, "abtest-write", src, tmp_dst, path, owner, mode]
    argv += [expect_sha256 or "", marker_path, marker_text]
    res = conn.run(argv, sudo=sudo, timeout=120)
    if res.rc == CHANGED_RC and expect_sha256:
        found = res.stdout.strip() or "?"
        raise ChangedUnderUs(
            f"changed under us: it has sha256 {found[:12]}, not the {expect_sha256[:12]} "
            "read before the write; nothing was written",
            path,
            "look at what changed it, then try again",
            found=found,
        )
    res.check(f"writing {path}")


def read_marker(conn: Connection, path: str, *, sudo: bool) -> Marker | None:
    """The marker at ``path``; None if there is none (or it is not one of ours)."""
    if stat_file(conn, path, sudo=sudo) is None:
        return None
    return Marker.parse(read_file(conn, path, sudo=sudo).decode("utf-8", "replace"))


def remove(conn: Connection, *paths: str, sudo: bool) -> None:
    """``rm -f`` in the order given (a marker goes before the backup it describes)."""
    conn.run(["rm", "-f", "--", *paths], sudo=sudo, timeout=20).check(
        f"removing {', '.join(paths)}"
    )
