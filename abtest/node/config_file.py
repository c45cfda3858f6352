"""The kubelet config file on the node, and what abtest keeps beside it while a change of
ours is in effect: the original (``<config>.abtest-original``) and a marker
(``<config>.abtest-original.marker``) listing the sha256 of every content we wrote and the
lock token of the change.

The question this module answers is "are these bytes ours?": the original or something we
wrote, per the journal entry, or per the marker when this database has no entry (the
controller crashed, or its database is lost). When they are not, someone else changed the
file under us: :meth:`ConfigFile.refuse` journals that (state ``changed``) and raises
:class:`~abtest.node.remote_files.ChangedUnderUs`; the caller has not written anything yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from abtest.errors import NodeError
from abtest.node import remote_files as rf
from abtest.node.records import reason_of
from abtest.node.remote_files import ABSENT, MARKER_SUFFIX, ChangedUnderUs
from abtest.node.session import NodeSession
from abtest.store.journal import ABANDONED, FAILED, Journal, JournalEntry

BACKUP_SUFFIX = ".abtest-original"


class ConfigFile:
    """``path`` (symlinks resolved) on the node behind ``session``."""

    def __init__(
        self,
        session: NodeSession,
        journal: Journal,
        path: str,
        progress: Callable[[str], None],
    ) -> None:
        self.ssh = session.ssh
        self.profile = session.profile
        self.sudo = session.profile.sudo
        self.node = session.profile.node_name
        self.journal = journal
        self.path = path
        self.backup = path + BACKUP_SUFFIX
        self.marker = self.backup + MARKER_SUFFIX
        self.progress = progress

    def read(self, path: str | None = None) -> bytes:
        return rf.read_file(self.ssh, path or self.path, sudo=self.sudo)

    def check_ours(self, entry: JournalEntry, current: bytes, *, force: bool = False) -> None:
        """Refuse unless ``current`` is the original or bytes we wrote (or ``force``)."""
        sha = rf.sha256(current)
        ours = {entry.original_sha256, *entry.applied.get("ours_sha256", [])}
        if entry.applied.get("config_sha256"):
            ours.add(str(entry.applied["config_sha256"]))
        if not (force or sha in ours):
            self.refuse(entry, sha)

    def refuse(self, entry: JournalEntry, found: str) -> NoReturn:
        """Someone else changed the file: journal it, leave the node as found, say so."""
        detail = (
            f"changed under us: {entry.path} has sha256 {found[:12]}, neither the original "
            f"({entry.original_sha256[:12]}) nor what abtest wrote; left as found "
            "(no write, no restart)"
        )
        rf.refuse_changed(
            self.journal, entry, detail, node=self.node, profile=self.profile.name, found=found
        )

    def require_no_backup(self) -> None:
        """Before a first apply: a backup already there is an earlier change's original,
        which must not be overwritten with what may be that change."""
        rf.require_no_backup(
            self.ssh,
            self.backup,
            sudo=self.sudo,
            earlier="an earlier change of abtest's (journaled in another database)",
            node=self.node,
            profile=self.profile.name,
        )

    def adopt(self) -> JournalEntry | None:
        """No journal entry in this database, but a backup of ours on the node: journal it,
        with what the marker beside it says is ours (only the backup's own bytes when an
        older abtest left no marker), to be restored."""
        if not rf.exists(self.ssh, self.backup, sudo=self.sudo):
            return None
        original = self.read(self.backup)
        marker = rf.read_marker(self.ssh, self.marker, sudo=self.sudo)
        self.progress(f"no journal entry here; restoring {self.backup} from the node")
        if marker is None:
            self.progress(f"no {self.marker}: only the backup's own bytes count as ours")
        return self.journal.begin(
            node_name=self.node,
            profile_name=self.profile.name,
            path=self.path,
            original=original,
            applied={
                "settings": {},
                "paths": [],
                "source": "node backup",
                "ours_sha256": list(marker.ours) if marker else [],
                "lock_token": marker.lock_token if marker else None,
            },
            backup_path=self.backup,
        )

    def keep_original(self, original: bytes, marker: str) -> None:
        """The node-side backup (owner and mode of the config; refused if one is already
        there) and its marker. Raises with neither on the node if either write fails."""
        like = rf.stat_file(self.ssh, self.path, sudo=self.sudo)
        rf.atomic_write(
            self.ssh, self.backup, original, sudo=self.sudo, like=like, expect_sha256=ABSENT
        )
        try:
            rf.atomic_write(self.ssh, self.marker, marker.encode(), sudo=self.sudo)
        except BaseException:
            self.remove_backup(self.backup)  # ours, made just above
            raise

    def write(self, data: bytes, *, current: bytes, marker: str) -> None:
        """``data`` over the config if it still has ``current`` just before the rename, the
        marker (listing ``data`` as ours) updated in the same remote step."""
        rf.atomic_write(
            self.ssh, self.path, data, sudo=self.sudo,
            expect_sha256=rf.sha256(current), marker=(self.marker, marker),
        )  # fmt: skip

    def put_original(self, entry: JournalEntry, current: bytes) -> None:
        """The entry's original over ``current`` (checked ours by the caller); refused if
        the file changes between that check and the rename."""
        try:
            rf.atomic_write(
                self.ssh, entry.path, entry.original, sudo=self.sudo,
                expect_sha256=rf.sha256(current),
            )  # fmt: skip
        except ChangedUnderUs as exc:
            self.refuse(entry, exc.found)
        self.progress(f"wrote the original {entry.path} back (sha256 {entry.original_sha256[:12]})")

    def abandon(self, entry: JournalEntry, exc: BaseException, *, made_backup: bool) -> None:
        """A first apply stopped before anything of ours took effect: remove the backup
        and marker if we made them, close the journal entry (``abandoned``)."""
        reason = reason_of(exc)
        try:
            if made_backup:
                self.remove_backup(self.backup)
        except BaseException as failure:
            detail = f"not applied: {reason}; removing {self.backup} failed: {failure}"
            self.journal.mark(entry.id, FAILED, detail=detail)
            raise NodeError(
                f"{detail}. Remove it, then run `abtest node restore --profile {self.profile.name}`"
            ) from failure
        changed = isinstance(exc, ChangedUnderUs) and made_backup
        why = "changed under us, left as found" if changed else "nothing was changed"
        self.journal.mark(entry.id, ABANDONED, detail=f"not applied: {reason}; {why}")

    def remove_backup(self, backup: str) -> None:
        """The marker first: a backup left without its marker is still checked."""
        rf.remove(self.ssh, backup + MARKER_SUFFIX, backup, sudo=self.sudo)
