"""A change the journal still calls pending, found undone on the node.

A database fault while a controller restored the node (a lost server, a full disk) can leave
the journal entry open though the node is back: the controller put the original back, saw the
restarted kubelet verified, removed its backup, and then could not write "restored". The next
controller on the node (a ``--resume``, ``abtest node check``, the next apply) closes such an
entry itself when the node proves it undone, so no hand step is needed once the store is back.

The proof, all of it read from the node: the config file is the entry's original bytes; neither
the backup nor its marker is there (an apply writes them before any change, a restore removes
them only after the restarted kubelet was verified); and no lock but a dead holder's of this
very change protects it. An entry in state ``failed`` or ``changed`` is never closed here: it
says a person must look.
"""

from __future__ import annotations

from abtest.errors import NodeError
from abtest.node import remote_files as rf
from abtest.node.connection import Connection
from abtest.node.lock import LockInfo
from abtest.node.remote_files import MARKER_SUFFIX
from abtest.store.journal import APPLIED, APPLYING, RESTORED, Journal, JournalEntry

#: the detail a closed entry carries
SETTLED = "closed later: found undone on the node (the journal could not be written then)"


def undone_on_node(
    conn: Connection, entry: JournalEntry, lock: LockInfo | None, *, sudo: bool
) -> bool:
    """Does the node prove ``entry`` (a config change) undone? See the module's proof."""
    if entry.kind != "config" or entry.state not in (APPLYING, APPLIED) or not entry.backup_path:
        return False
    if lock is not None:
        token = entry.applied.get("lock_token")
        if not token or lock.token != token or lock.holder_alive() is not False:
            return False
    backup = entry.backup_path
    if rf.exists(conn, backup, sudo=sudo) or rf.exists(conn, backup + MARKER_SUFFIX, sudo=sudo):
        return False
    try:
        current = rf.read_file(conn, entry.path, sudo=sudo)
    except NodeError:  # an unreadable file proves nothing
        return False
    return rf.sha256(current) == entry.original_sha256


def settle(
    conn: Connection, journal: Journal, node_name: str, lock: LockInfo | None, *, sudo: bool
) -> JournalEntry | None:
    """Close the node's pending config entry if the node proves it undone; the closed entry,
    or None when there was none to close."""
    entry = journal.pending(node_name)
    if entry is None or not undone_on_node(conn, entry, lock, sudo=sudo):
        return None
    return journal.mark(entry.id, RESTORED, detail=SETTLED)
