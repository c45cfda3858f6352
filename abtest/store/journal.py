"""The node journal: what was changed on which node, and the original bytes to put back.

One row per change (table ``node_journal``), with the run that made it when a run did
(``Journal(store, run_id=...)``; None for `abtest node` commands and rows from before schema
v4). A row is *pending* while the node may differ from its original (states ``applying``,
``applied``, ``failed``, ``changed``); ``restored`` and ``abandoned`` close it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from abtest.store.db import Store, now_iso

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
        self.store.update("node_journal", {"id": entry_id}, values)
        return self.get(entry_id)

    def get(self, entry_id: int) -> JournalEntry:
        rows = self.store.query("SELECT * FROM node_journal WHERE id = ?", (entry_id,))
        if not rows:
            raise KeyError(entry_id)
        return _entry(rows[0])

    def pending(self, node_name: str, kind: str = "config") -> JournalEntry | None:
        """The node's newest unfinished change of one kind (config or binary), if any."""
        marks = ", ".join("?" for _ in PENDING)
        rows = self.store.query(
            f"SELECT * FROM node_journal WHERE node_name = ? AND kind = ? AND state IN ({marks}) "
            "ORDER BY id DESC LIMIT 1",
            (node_name, kind, *PENDING),
        )
        return _entry(rows[0]) if rows else None

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
