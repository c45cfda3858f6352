"""The sha256 of a file on the node, hashed again only when the file may have changed.

A kubelet binary is about 80 MB: ``sha256sum`` takes 0.4-0.7 s of the node's CPU, and one
binary swap and its restore checked the same unchanged files (the candidate, the installed
binary, the backup) 13 times, about 6 s of every kubelet-build visit on the lab. Each check
still runs on the node, first reading the file's identity (device, inode, size, and
modification and change times to the nanosecond); the digest of the last hash of that path
is reused only when the identity is the one it was taken at. A file we replace is renamed
over (a new inode), and any write moves its change time, which no user-space call can set
back.

Like git's index, a file whose change time is within ``RACY_S`` of the moment it was read is
not remembered: a write in the same timestamp tick as the read would leave the identity
unchanged. A node whose ``stat`` cannot print the identity (an unusual userland) gets a plain
``sha256sum`` every time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from abtest.node.connection import Result

Run = Callable[[list[str]], Result]  # NodeSession.run: an argv on the node, sudo as profiled

# Prints the identity, then the file's age by its change time in whole seconds, then (unless
# the identity is $2, the one the caller holds a digest for) the sha256sum line.
_SCRIPT = (
    'id=$(stat -L -c "%d %i %s %y %z" -- "$1") || exit 3; '
    'age=$(( $(date +%s) - $(stat -L -c %Z -- "$1") )) || exit 3; '
    'printf "%s\\n%s\\n" "$id" "$age"; '
    '[ "$id" = "$2" ] || exec sha256sum -- "$1"'
)
RACY_S = 2


@dataclass
class DigestMemo:
    """Digests by path, each with the identity its file had when hashed (one per node: memo_for)."""

    known: dict[str, tuple[str, str]] = field(default_factory=dict)
    hashed: int = 0  # how many times a file was really hashed (tests read it)
    reused: int = 0


def _digest(line: str) -> str | None:
    word = line.split()[0] if line.split() else ""
    if len(word) == 64 and all(c in "0123456789abcdef" for c in word):
        return word
    return None


def file_sha256(run: Run, path: str, memo: DigestMemo, racy_s: int = RACY_S) -> str | None:
    """The sha256 of ``path`` on the node (``run`` runs an argv there, with sudo as the
    profile says), or None when it is missing or unreadable."""
    held = memo.known.get(path)
    res = run(["sh", "-c", _SCRIPT, "sh", path, held[0] if held else ""])
    lines = res.stdout.splitlines()
    if res.ok and len(lines) == 2 and held and lines[0] == held[0]:
        memo.reused += 1
        return held[1]
    if res.ok and len(lines) == 3 and lines[1].lstrip("-").isdigit():
        sha = _digest(lines[2])
        if sha is not None:
            memo.hashed += 1
            if int(lines[1]) >= racy_s:
                memo.known[path] = (lines[0], sha)
            else:
                memo.known.pop(path, None)
            return sha
    # missing, unreadable, or a stat that cannot print the identity: the plain hash decides
    memo.known.pop(path, None)
    return _plain(run, path, memo)


def _plain(run: Run, path: str, memo: DigestMemo) -> str | None:
    res = run(["sha256sum", "--", path])
    if not res.ok:
        return None
    memo.hashed += 1
    return _digest(res.stdout)


# One memo per node for the whole process: the pre-flight's session and the sweep's hash the
# same candidate (the identity check makes sharing safe whoever changed the file meanwhile).
_MEMOS: dict[tuple[object, ...], DigestMemo] = {}


def memo_for(*node: object) -> DigestMemo:
    """The process's digest memo for the node ``node`` names (hashable parts)."""
    return _MEMOS.setdefault(tuple(node), DigestMemo())
