"""Swap the kubelet binary for a candidate file on the node, and put the original back.

Used by the regression gate ("is this kubelet build slower?"). Like the config: the
original is kept byte-for-byte on the node (``<binary>.abtest-original``) with its sha256,
owner and mode in the journal (kind ``binary``) and in a marker beside it
(``<binary>.abtest-original.marker``, which also lists the sha256 of every candidate we
installed and the lock token), so ``abtest node restore`` finds and checks the swap even
when the controller's database is lost. Every copy goes through a temp file in the same
directory (fsync, rename, a trap that removes it on failure) and is verified by sha256; the
installed file keeps the original's owner and mode. A binary that is not one we installed
is refused, not overwritten (``--force`` overrides). The restart that makes a swap take
effect is the caller's (the next config apply restarts with force_restart).

The original is never overwritten unless a verified backup of it is on the node: a journal
entry whose backup is gone (the node was restored through another database, or by hand) is
closed when the node runs the original again, and refused when it does not. A candidate
byte-identical to the original (a bisection's good end is often the node's own release) is
no swap at all: installing it puts the original back, so the marker's "ours" never holds
the original's sha256 and a restore can never mistake one for the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtest.config.full_match import whole
from abtest.errors import NodeError, UserError
from abtest.node import remote_files as rf
from abtest.node.file_digest import file_sha256
from abtest.node.remote_files import ABSENT, MARKER_SUFFIX, ChangedUnderUs, Marker
from abtest.node.session import NodeSession
from abtest.store.journal import (
    ABANDONED,
    APPLIED,
    APPLYING,
    FAILED,
    RESTORED,
    Journal,
    JournalEntry,
)

SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+-]+")
BACKUP_SUFFIX = ".abtest-original"


@dataclass(frozen=True)
class BinaryState:
    path: str
    sha256: str
    swapped_from: str | None  # the candidate file now installed, or None for the original


def check_path(path: str, flag: str) -> str:
    if not whole(SAFE_PATH, path) or "/../" in path or path.endswith("/.."):
        raise UserError(f"invalid binary path {path!r}", flag, "an absolute path on the node")
    return path


class KubeletBinary:
    def __init__(self, session: NodeSession, journal: Journal) -> None:
        self.session = session
        self.journal = journal
        self.profile = session.profile
        self.given = check_path(self.profile.kubelet_binary_path, "kubelet.binary_path")
        self.conn = session.ssh
        self.sudo = self.profile.sudo
        self._path: str | None = None

    @property
    def path(self) -> str:
        """The file the profile's binary_path names, symlinks resolved on the node (as the
        config path is): a swap renames over the real file, so a symlinked binary_path stays a
        symlink through swap and restore."""
        if self._path is None:
            real = rf.realpath(self.conn, self.given, sudo=self.sudo)
            self._path = check_path(real, "kubelet.binary_path (resolved)")
        return self._path

    @property
    def backup(self) -> str:
        return self.path + BACKUP_SUFFIX

    @property
    def marker(self) -> str:
        return self.backup + MARKER_SUFFIX

    def _sha256(self, path: str) -> str | None:
        return file_sha256(
            lambda argv: self.session.run(argv, timeout=60), path, self.session.digests
        )

    def pending(self) -> JournalEntry | None:
        return self.journal.pending(self.profile.node_name, kind="binary")

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

    def adopt(self) -> JournalEntry | None:
        """No journal entry here, but a backup of ours on the node (the database that
        swapped the binary is lost): journal it from the node's marker, to be restored."""
        if not rf.exists(self.conn, self.backup, sudo=self.sudo):
            self._refuse_lost_original()
            return None
        marker = rf.read_marker(self.conn, self.marker, sudo=self.sudo)
        if marker is None:  # an older abtest's backup: only the backup itself is known
            marker = Marker((), self._sha256(self.backup) or "")
        return self.journal.begin(
            node_name=self.profile.node_name,
            profile_name=self.profile.name,
            path=self.path,
            original=b"",
            applied={
                "source": "node marker",
                "original_sha256": marker.original_sha256,
                "ours": list(marker.ours),
                "owner": marker.owner,
                "mode": marker.mode,
                "lock_token": marker.lock_token,
            },
            backup_path=self.backup,
            kind="binary",
        )

    def _refuse_lost_original(self) -> None:
        """A marker without its backup: harmless (removed) while the node runs the original,
        refused while it runs a build of ours, so no restore reports success over it."""
        marker = rf.read_marker(self.conn, self.marker, sudo=self.sudo)
        if marker is None:
            return
        current = self._sha256(self.path) or ABSENT
        if current == marker.original_sha256:
            rf.remove(self.conn, self.marker, sudo=self.sudo)
            return
        raise NodeError(
            f"{self.path} on {self.profile.node_name} has sha256 {current[:12]}, not the "
            f"original kubelet's {marker.original_sha256[:12]}, and the original's backup "
            f"{self.backup} is gone: put the node's own kubelet back at {self.path} by hand "
            f"(its marker {self.marker} names the sha256 to match)"
        )

    def _still_in_effect(self, entry: JournalEntry) -> JournalEntry | None:
        """``entry`` if its backup still holds the original; None (entry closed) when the
        node was restored without this database; refused when neither holds, since a copy
        over the binary would then destroy the only original there is."""
        original = str(entry.applied.get("original_sha256", ""))
        if self._sha256(self.backup) == original:
            return entry
        current = self.check_ours(entry)
        if current == original:
            rf.remove(self.conn, self.marker, sudo=self.sudo)
            detail = "restored outside this journal: the node runs the original, no backup left"
            self.journal.close_entry(entry.id, RESTORED, detail)
            return None
        raise NodeError(
            f"{self.backup} does not match the original kubelet's sha256 {original[:12]} and "
            f"{self.path} is not the original either: nothing was changed; restore the binary "
            f"by hand (journal #{entry.id})"
        )

    def install(self, candidate: str | None, *, lock_token: str | None = None) -> BinaryState:
        """Make ``candidate`` (None: the original) the file at the profile's binary path."""
        entry = self.pending()
        if entry is not None:
            entry = self._still_in_effect(entry)
        if candidate is None:
            if entry is not None:
                self.put_back()
            return BinaryState(self.path, self._sha256(self.path) or "", None)
        want = self.require_candidate(candidate)
        original = entry.applied.get("original_sha256") if entry else self._sha256(self.path)
        if want == original:  # the original's own bytes: no swap, the original back
            if entry is not None:
                self.put_back()
            return BinaryState(self.path, want, candidate)
        if entry is not None:
            current = self.check_ours(entry)
            kept = {*entry.applied.get("ours", []), want} - {entry.applied["original_sha256"]}
            ours = sorted(kept)
            applied = {**entry.applied, "candidate": candidate, "ours": ours, "put_back": False}
            entry = self.journal.mark(entry.id, APPLYING, applied=applied)
            self._write_marker(entry)
            self._copy_over(candidate, want, entry, expect=current)
        else:
            self._first_install(candidate, want, lock_token)
            entry = self.pending()
            assert entry is not None
        self.journal.mark(entry.id, APPLIED, detail=f"kubelet binary <- {candidate}")
        return BinaryState(self.path, want, candidate)

    def _first_install(self, candidate: str, want: str, lock_token: str | None) -> None:
        st = rf.stat_file(self.conn, self.path, sudo=self.sudo)
        original = self._sha256(self.path)
        if st is None or original is None:
            raise NodeError(f"the kubelet binary {self.path} is missing on the node")
        rf.require_no_backup(
            self.conn,
            self.backup,
            sudo=self.sudo,
            earlier="an earlier swap of abtest's",
            node=self.profile.node_name,
            profile=self.profile.name,
        )
        entry = self.journal.begin(
            node_name=self.profile.node_name,
            profile_name=self.profile.name,
            path=self.path,
            original=b"",  # the bytes stay on the node: their sha256 is in applied_json
            applied={
                "candidate": candidate,
                "original_sha256": original,
                "ours": [want],  # never the original: a restore tells the two apart
                "owner": f"{st.uid}:{st.gid}",
                "mode": f"{st.mode:o}",
                "lock_token": lock_token,
            },
            backup_path=self.backup,
            kind="binary",
        )
        # every change from here on is inside the block that undoes it
        made_backup = False
        try:
            owner, mode = f"{st.uid}:{st.gid}", f"{st.mode:o}"
            rf.atomic_copy(
                self.conn, self.path, self.backup, owner=owner, mode=mode, sudo=self.sudo,
                expect_sha256=ABSENT,
            )  # fmt: skip
            made_backup = True
            if self._sha256(self.backup) != original:
                raise NodeError(f"{self.backup}: copy does not match the original's sha256")
            self._write_marker(entry)
            self._copy_over(candidate, want, entry, expect=original)
        except BaseException as exc:
            self._undo_first_install(entry, exc, made_backup)
            raise

    def _undo_first_install(
        self, entry: JournalEntry, exc: BaseException, made_backup: bool
    ) -> None:
        """Back to the node as found. A backup (and marker) the failed copy did not make is
        not ours to remove: a failed copy leaves no temp file, and nothing else."""
        original = str(entry.applied["original_sha256"])
        why = f"{type(exc).__name__}: {exc}"
        try:
            swapped = (
                made_backup
                and not isinstance(exc, ChangedUnderUs)
                and self._sha256(self.path) != original
            )
            if swapped:
                self._copy_over(self.backup, original, entry)
            if made_backup:
                rf.remove(self.conn, self.marker, self.backup, sudo=self.sudo)
        except BaseException as failure:
            detail = f"swap failed: {why}; undoing it failed: {failure}"
            self.journal.mark(entry.id, FAILED, detail=detail)
            raise NodeError(
                f"{detail}. Check {self.path} on {self.profile.node_name}, then run "
                f"`abtest node restore --profile {self.profile.name}`"
            ) from failure
        if swapped:
            self.journal.mark(entry.id, RESTORED, detail=f"swap failed: {why}; original back")
        else:
            self.journal.mark(entry.id, ABANDONED, detail=f"swap failed: {why}; nothing changed")

    def check_ours(self, entry: JournalEntry, *, force: bool = False) -> str:
        """The binary's sha256, if it is the original or one we installed; else refuse
        (journal ``changed``, node left as found) unless ``force``."""
        current = self._sha256(self.path) or ABSENT
        original = str(entry.applied.get("original_sha256", ""))
        if force or current == original or current in entry.applied.get("ours", []):
            return current
        detail = (
            f"changed under us: {self.path} has sha256 {current[:12]}, neither the original "
            f"({original[:12]}) nor a candidate abtest installed; left as found"
        )
        rf.refuse_changed(
            self.journal,
            entry,
            detail,
            node=self.profile.node_name,
            profile=self.profile.name,
            found=current,
        )

    def put_back(self, *, force: bool = False) -> bool:
        """Restore the original binary from the node's backup; True if something was done."""
        entry = self.pending()
        if entry is None:
            return False
        current = self.check_ours(entry, force=force)
        original = str(entry.applied.get("original_sha256", ""))
        if current != original:
            if self._sha256(self.backup) != original:
                raise NodeError(
                    f"{self.backup} does not match the original kubelet's sha256 "
                    f"{original[:12]}: restore the binary by hand (journal #{entry.id})"
                )
            self._copy_over(self.backup, original, entry, expect=current)
        # the backup stays until a restart has the node run the original again (settle): a
        # kill before it leaves the node's kubelet process a build of ours, and this entry
        # is what makes the next restore restart it
        self.journal.mark(
            entry.id,
            APPLIED,
            detail="original kubelet binary back in place; running once the kubelet restarts",
            applied={**entry.applied, "put_back": True},
        )
        return True

    def settle(self) -> bool:
        """After a verified restart: a put-back original now runs, so its backup and marker
        go and its entry closes. True if one was settled."""
        entry = self.pending()
        if entry is None or not entry.applied.get("put_back"):
            return False
        if self._sha256(self.path) != entry.applied.get("original_sha256"):
            return False
        rf.remove(self.conn, self.marker, self.backup, sudo=self.sudo)
        # the binary is back whatever the database says now (a fault: written later)
        self.journal.close_entry(entry.id, RESTORED, "original kubelet binary back and running")
        return True

    def _write_marker(self, entry: JournalEntry) -> None:
        a = entry.applied
        marker = Marker(
            tuple(a.get("ours", [])),
            str(a["original_sha256"]),
            a.get("lock_token"),
            a.get("owner"),
            a.get("mode"),
        )
        rf.atomic_write(self.conn, self.marker, marker.render().encode(), sudo=self.sudo)

    def _copy_over(
        self, source: str, want_sha: str, entry: JournalEntry, expect: str | None = None
    ) -> None:
        """``source`` over the binary with the original's owner and mode, verified."""
        owner, mode = entry.applied.get("owner"), entry.applied.get("mode")
        if not (owner and mode):  # an older entry: the backup kept them (cp -p)
            st = rf.stat_file(self.conn, self.backup, sudo=self.sudo)
            if st is None:
                raise NodeError(f"{self.backup} is missing: restore the binary by hand")
            owner, mode = f"{st.uid}:{st.gid}", f"{st.mode:o}"
        rf.atomic_copy(
            self.conn, source, self.path, owner=str(owner), mode=str(mode), sudo=self.sudo,
            expect_sha256=expect,
        )  # fmt: skip
        if self._sha256(self.path) != want_sha:
            raise NodeError(f"{self.path}: sha256 after the copy is not {source}'s")
