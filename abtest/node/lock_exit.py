"""What a controller leaves of its node lock when it exits: nothing, unless a change the lock
protects is still in effect; then the lock is kept, naming that change, its settings (its
claim, which ``abtest node check`` compares with the running kubelet) and the command that
undoes it.

What is in effect is what the controller knows, not only what the database says: its journal
remembers the states it could not write (a lost server, a full disk), so a restore the database
never heard of still frees the lock, and a lock never claims a change that is undone.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from abtest.config.playbook import NodeProfile
from abtest.errors import StoreError
from abtest.node.lock import NodeLock
from abtest.node.records import describe_settings
from abtest.store.db import Store, resolve
from abtest.store.journal import Journal, JournalEntry


def pending_changes(journal: Journal, node: str) -> list[JournalEntry]:
    """The node's unfinished changes (config, binary); from what ``journal`` has seen when
    the database cannot answer."""
    found = []
    for kind in ("config", "binary"):
        try:
            entry = journal.pending(node, kind=kind)
        except StoreError:
            entry = journal.known_pending(node, kind=kind)
        if entry is not None:
            found.append(entry)
    return found


def leave_lock(lock: NodeLock, journal: Journal, profile: NodeProfile) -> None:
    """Release ``lock`` unless a change of its own is still in effect; then keep it."""
    held = lock.held
    if held is None:
        return
    journal.flush()  # the database may be back: tell it what it missed
    node = profile.node_name
    ours = [e for e in pending_changes(journal, node) if e.applied.get("lock_token") == held.token]
    if not ours:
        lock.release()
        return
    if held.state == "kept":
        return
    pending = ours[0]
    settings = pending.applied.get("settings", {})
    what = (
        describe_settings(settings)
        if pending.kind == "config"
        else f"kubelet binary {pending.applied.get('candidate')}"
    )
    lock.keep(
        f"{what} (journal #{pending.id} in {journal.store.name}); "
        f"undo: abtest node restore --profile {profile.name}{_db_option(journal.store)}",
        claim=settings if pending.kind == "config" else None,
    )


def _db_option(store: Store) -> str:
    """The ``--db`` a restore needs to find this journal: none for the database a bare
    command opens, the path of another SQLite file, a placeholder for a server's URL (its
    password is never written to the node)."""
    if store.location == resolve(None):
        return ""
    if isinstance(store.location, Path):
        return f" --db {shlex.quote(str(store.location))}"
    return " --db URL-OF-THAT-DATABASE"
