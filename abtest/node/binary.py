"""Swap the kubelet binary for a candidate file on the node, and put the original back.

Used by the regression gate ("is this kubelet build slower?"). Like the config: the
original is kept byte-for-byte on the node (``<binary>.abtest-original``, a ``cp -p`` copy)
with its sha256 in the journal (kind ``binary``); a swap is a copy to a temp file in the
same directory and a rename; every step is verified by sha256. The restart that makes the
swap take effect is the caller's (the next config apply restarts with force_restart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtest.errors import NodeError, UserError
from abtest.node.session import NodeSession
from abtest.store.journal import APPLIED, APPLYING, RESTORED, Journal

SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+-]+")
BACKUP_SUFFIX = ".abtest-original"


@dataclass(frozen=True)
class BinaryState:
    path: str
    sha256: str
    swapped_from: str | None  # the candidate file now installed, or None for the original


def check_path(path: str, flag: str) -> str:
    if not SAFE_PATH.fullmatch(path) or "/../" in path or path.endswith("/.."):
        raise UserError(f"invalid binary path {path!r}", flag, "an absolute path on the node")
    return path


class KubeletBinary:
    def __init__(self, session: NodeSession, journal: Journal) -> None:
        self.session = session
        self.journal = journal
        self.profile = session.profile
        self.path = check_path(self.profile.kubelet_binary_path, "kubelet.binary_path")
        self.backup = self.path + BACKUP_SUFFIX

    def _sha256(self, path: str) -> str | None:
        res = self.session.run(["sha256sum", "--", path], timeout=60)
        if not res.ok:
            return None
        return res.stdout.split()[0]

    def require_candidate(self, candidate: str) -> str:
        """The candidate's sha256; a missing file is an error before anything changes."""
        check_path(candidate, "--candidate binary=")
        sha = self._sha256(candidate)
        if sha is None:
            raise NodeError(
                f"candidate kubelet binary {candidate} does not exist (or is unreadable) on "
                f"{self.profile.node_name}; nothing was changed"
            )
        return sha

    def install(self, candidate: str | None) -> BinaryState:
        """Make ``candidate`` (None: the original) the file at the profile's binary path."""
        entry = self.journal.pending(self.profile.node_name, kind="binary")
        if candidate is None:
            if entry is not None:
                self.put_back()
            return BinaryState(self.path, self._sha256(self.path) or "", None)
        want = self.require_candidate(candidate)
        if entry is None:
            original = self._sha256(self.path)
            if original is None:
                raise NodeError(f"the kubelet binary {self.path} is missing on the node")
            self.session.run(["cp", "-p", "--", self.path, self.backup], timeout=120).check(
                f"keeping the original kubelet binary as {self.backup}"
            )
            if self._sha256(self.backup) != original:
                raise NodeError(f"{self.backup}: copy does not match the original's sha256")
            entry = self.journal.begin(
                node_name=self.profile.node_name,
                profile_name=self.profile.name,
                path=self.path,
                original=b"",
                applied={"candidate": candidate, "original_sha256": original},
                backup_path=self.backup,
                kind="binary",
            )
            # the journal's original_sha256 is of b"" (the bytes stay on the node): keep the
            # binary's own in applied_json, checked again on restore
        else:
            self.journal.mark(entry.id, APPLYING, applied={**entry.applied, "candidate": candidate})
        self._copy_over(candidate, want)
        self.journal.mark(entry.id, APPLIED, detail=f"kubelet binary <- {candidate}")
        return BinaryState(self.path, want, candidate)

    def put_back(self) -> bool:
        """Restore the original binary from the node's backup; True if something was done."""
        entry = self.journal.pending(self.profile.node_name, kind="binary")
        if entry is None:
            return False
        original = str(entry.applied.get("original_sha256", ""))
        if self._sha256(self.path) != original:
            if self._sha256(self.backup) != original:
                raise NodeError(
                    f"{self.backup} does not match the original kubelet's sha256 "
                    f"{original[:12]}: restore the binary by hand (journal #{entry.id})"
                )
            self._copy_over(self.backup, original)
        self.session.run(["rm", "-f", "--", self.backup], timeout=30).check("removing backup")
        self.journal.mark(entry.id, RESTORED, detail="original kubelet binary back")
        return True

    def _copy_over(self, source: str, want_sha: str) -> None:
        tmp = f"{self.path}.abtest-tmp"
        script = 'cp -p -- "$1" "$2" && mv -f -- "$2" "$3"'
        self.session.run(
            ["sh", "-c", script, "abtest-swap", source, tmp, self.path], timeout=120
        ).check(f"installing {source} as {self.path}")
        if self._sha256(self.path) != want_sha:
            raise NodeError(f"{self.path}: sha256 after the copy is not {source}'s")
