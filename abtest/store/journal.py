"""The node journal: what was changed on which node, and the original bytes to put back.

One row per change (table ``node_journal``), with the run that made it when a run did
(``Journal(store, run_id=...)``; None for `abtest node` commands and rows from before schema
v4). A row is *pending* while the node may differ from its original (states ``applying``,
``applied``, ``failed``, ``changed``); ``restored`` and ``abandoned`` close it.

The database can fail while a change is in effect (a lost server, a full disk). A
:class:`Journal` therefore remembers every entry it has seen, and a state it could not write
(``lagging``): the controller still restores the node from what it remembers, and frees the
lock by what it knows the node is in. The database catches up when a later write works
(:meth:`Journal.flush`), or the next controller finds the change undone on the node and
closes the entry (abtest.node.settle).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, replace
from typing import Any

from abtest.errors import StoreError
from abtest.store.db import Store
from abtest.store.tables import now_iso

APPLYING = "applying"  # about to write / written, not yet healthy
APPLIED = "applied"  # written and verified healthy
RESTORED = "restored"  # the original is back (after restore or rollback)
FAILED = "failed"  # rollback did not finish: the node needs `abtest node restore`
#: the file is not what we wrote (someone else changed it under us): left as found;
#: `abtest node restore --force` puts the original back over it
CHANGED = "changed"
#: stopped before anything of ours took effect (e.g. the backup write failed): nothing to undo
ABANDONED = "abandoned"
PENDING = (APPLYING, APPLIED, FAILED, CHANGED)
STATES = (APPLYING, APPLIED, RESTORED, FAILED, CHANGED, ABANDONED)


@dataclass(frozen=True)
class JournalEntry:
    id: int
    node_name: str
    profile_name: str
    kind: str
    path: str
    backup_path: str | None
    original: bytes
    original_sha256: str
    applied: dict[str, Any]
    state: str
    detail: str | None
    created_at: str
    updated_at: str
    run_id: str | None = None

    @property
    def pending(self) -> bool:
        return self.state in PENDING


class Journal:
    """Journal operations over a :class:`~abtest.store.db.Store`; every change it begins is
    recorded as ``run_id``'s (None: no run's)."""

    def __init__(self, store: Store, run_id: str | None = None) -> None:
        self.store = store
        self.run_id = run_id
        #: every entry this journal has read or written, as the node is (lagging applied)
        self.known: dict[int, JournalEntry] = {}
        #: entries whose state could not be written: what the database must still be told
        self.lagging: dict[int, JournalEntry] = {}

    def _seen(self, entry: JournalEntry) -> JournalEntry:
        """The entry as this journal knows it: a state it could not write wins."""
        entry = self.lagging.get(entry.id, entry)
        self.known[entry.id] = entry
        return entry

    def begin(
        self,
        *,
        node_name: str,
        profile_name: str,
        path: str,
        original: bytes,
        applied: dict[str, Any],
        backup_path: str | None = None,
        kind: str = "config",
    ) -> JournalEntry:
        """Record a change about to be made (state ``applying``), with the original bytes."""
        now = now_iso()
        entry_id = self.store.insert(
            "node_journal",
            {
                "node_name": node_name,
                "profile_name": profile_name,
                "kind": kind,
                "path": path,
                "backup_path": backup_path,
                "original": sqlite3.Binary(original),
                "original_sha256": hashlib.sha256(original).hexdigest(),
                "applied_json": json.dumps(applied, sort_keys=True, default=str),
                "state": APPLYING,
                "detail": None,
                "created_at": now,
                "updated_at": now,
                "run_id": self.run_id,
            },
        )
        return self.get(entry_id)

    def mark(
        self,
        entry_id: int,
        state: str,
        detail: str | None = None,
        applied: dict[str, Any] | None = None,
    ) -> JournalEntry:
        if state not in STATES:
            raise ValueError(f"unknown journal state {state!r}")
        values: dict[str, Any] = {"state": state, "updated_at": now_iso()}
        if detail is not None:
            values["detail"] = detail
        if applied is not None:
            values["applied_json"] = json.dumps(applied, sort_keys=True, default=str)
        try:
            self.store.update("node_journal", {"id": entry_id}, values)
        except StoreError:
            # remembered as the node is, for this controller's restore and lock; written later
            if entry_id in self.known:
                self.lagging[entry_id] = replace(
                    self.known[entry_id],
                    state=state,
                    detail=detail if detail is not None else self.known[entry_id].detail,
                    applied=applied if applied is not None else self.known[entry_id].applied,
                )
                self.known[entry_id] = self.lagging[entry_id]
            raise
        self.lagging.pop(entry_id, None)
        return self.get(entry_id)

    def close_entry(self, entry_id: int, state: str, detail: str) -> StoreError | None:
        """Mark a change closed once the node is back: a database fault does not undo that
        (the state is kept as ``lagging``); the fault is returned for the caller to report."""
        try:
            self.mark(entry_id, state, detail=detail)
        except StoreError as exc:
            return exc
        return None

    def flush(self) -> bool:
        """Write the states that could not be written; True when none is left lagging."""
        for entry in list(self.lagging.values()):
            try:
                self.store.update(
                    "node_journal",
                    {"id": entry.id},
                    {"state": entry.state, "detail": entry.detail, "updated_at": now_iso()},
                )
            except StoreError:
                return False
            self.lagging.pop(entry.id, None)
        return True

    def get(self, entry_id: int) -> JournalEntry:
        rows = self.store.query("SELECT * FROM node_journal WHERE id = ?", (entry_id,))
        if not rows:
            raise KeyError(entry_id)
        return self._seen(_entry(rows[0]))

    def pending(self, node_name: str, kind: str = "config") -> JournalEntry | None:
        """The node's newest unfinished change of one kind (config or binary), if any."""
        marks = ", ".join("?" for _ in PENDING)
        try:
            rows = self.store.query(
                f"SELECT * FROM node_journal WHERE node_name = ? AND kind = ? "
                f"AND state IN ({marks}) ORDER BY id DESC LIMIT 1",
                (node_name, kind, *PENDING),
            )
        except StoreError:
            if not self.known:
                raise  # nothing seen here: no answer without the database
            return self.known_pending(node_name, kind)
        if not rows:
            return None
        entry = self._seen(_entry(rows[0]))
        return entry if entry.pending else None

    def known_pending(self, node_name: str, kind: str = "config") -> JournalEntry | None:
        """The node's newest unfinished change of one kind among the entries this journal has
        seen (the answer when the database cannot be read)."""
        mine = [
            e
            for e in self.known.values()
            if e.node_name == node_name and e.kind == kind and e.pending
        ]
        return max(mine, key=lambda e: e.id) if mine else None

    def original(self, entry_id: int) -> bytes:
        return self.get(entry_id).original

    def history(self, node_name: str, limit: int = 20) -> list[JournalEntry]:
        rows = self.store.query(
            "SELECT * FROM node_journal WHERE node_name = ? ORDER BY id DESC LIMIT ?",
            (node_name, limit),
        )
        return [_entry(r) for r in rows]


def _entry(row: sqlite3.Row) -> JournalEntry:
    original = row["original"]
    if isinstance(original, str):
        original = original.encode("utf-8")
    return JournalEntry(
        id=int(row["id"]),
        node_name=row["node_name"],
        profile_name=row["profile_name"],
        kind=row["kind"],
        path=row["path"],
        backup_path=row["backup_path"],
        original=bytes(original or b""),
        original_sha256=row["original_sha256"],
        applied=json.loads(row["applied_json"] or "{}"),
        state=row["state"],
        detail=row["detail"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        run_id=row["run_id"],
    )
