"""The results database (SQLite, standard library). Every write commits before returning,
so a finished round is on disk before the next one starts."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from abtest.errors import UserError
from abtest.paths import check_db_path
from abtest.store.schema import MIGRATIONS, SCHEMA_VERSION
from abtest.store.tables import Arms, Rounds, Runs, Visits


def default_path() -> Path:
    env = os.environ.get("ABTEST_DB")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "abtest" / "results.sqlite"


def _create_private(path: Path) -> None:
    """A new database is 0600 (SQLite gives its -wal and -shm files the same mode): it keeps
    copies of kubelet configs, which are nobody else's to read."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise UserError(
            f"cannot create {path}: {exc.strerror}", "--db", "give a writable path"
        ) from None
    os.close(fd)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Store:
    """One connection to the results database, migrated to SCHEMA_VERSION on open."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_path()
        where = "--db" if path else "results database ($ABTEST_DB or the default)"
        check_db_path(self.path, where)
        if path and not self.path.parent.is_dir():
            # a typo in --db must not leave a new folder tree behind
            raise UserError(
                f"folder {self.path.parent} does not exist",
                where,
                "create it, or give a path in an existing folder",
            )
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _create_private(self.path)
        try:
            self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = FULL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise UserError(
                f"cannot use {self.path} as the results database: {exc}",
                where,
                "give the results database, or a new file name",
            ) from None
        # the typed API of the sweep's tables (abtest.store.tables): no SQL above the store
        self.runs = Runs(self)
        self.arms = Arms(self)
        self.visits = Visits(self)
        self.rounds = Rounds(self)

    def _migrate(self) -> None:
        version = int(self.conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise UserError(
                f"results database is schema v{version}, this abtest knows up to v{SCHEMA_VERSION}",
                str(self.path),
                "upgrade abtest, or point ABTEST_DB/--db at another file",
            )
        for target in range(version, SCHEMA_VERSION):
            with self.transaction():
                for statement in _statements(MIGRATIONS[target]):
                    self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version = {target + 1}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    @staticmethod
    def exists(path: Path | str | None = None) -> bool:
        """Is there a results database yet (without creating one)?"""
        return (Path(path) if path else default_path()).exists()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- generic helpers ----------------------------------------------------------------

    def insert(self, table: str, row: Mapping[str, Any]) -> int:
        cols = list(row)
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        with self.transaction() as c:
            cur = c.execute(sql, [_encode(row[k]) for k in cols])
        return int(cur.lastrowid or 0)

    def insert_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        cols = list(rows[0])
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        with self.transaction() as c:
            c.executemany(sql, [[_encode(r[k]) for k in cols] for r in rows])

    def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        sets = ", ".join(f"{k} = ?" for k in values)
        where = " AND ".join(f"{k} = ?" for k in key)
        with self.transaction() as c:
            c.execute(
                f"UPDATE {table} SET {sets} WHERE {where}",
                [*(_encode(v) for v in values.values()), *key.values()],
            )

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return list(self.conn.execute(sql, params))

    def frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        return pd.read_sql_query(sql, self.conn, params=list(params))

    # --- runs ---------------------------------------------------------------------------

    def run_row(self, run_id: str) -> sqlite3.Row:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise UserError(f"no run {run_id!r}", str(self.path), "see `abtest runs`")
        return rows[0]

    def runs_frame(self) -> pd.DataFrame:
        return self.frame(
            "SELECT r.id, r.kind, r.status, r.created_at, r.finished_at, r.node_name, "
            "r.playbook_name, r.design, "
            "(SELECT COUNT(*) FROM rounds WHERE run_id = r.id) AS rounds, "
            "(SELECT COUNT(*) FROM rounds WHERE run_id = r.id AND accepted = 1) AS accepted "
            "FROM runs r ORDER BY r.created_at DESC"
        )

    def rounds_frame(self, run_id: str) -> pd.DataFrame:
        return self.frame("SELECT * FROM rounds WHERE run_id = ? ORDER BY id", (run_id,))

    def pods_frame(self, run_id: str) -> pd.DataFrame:
        return self.frame(
            "SELECT p.*, r.arm, r.size, r.block, r.warmup, r.accepted FROM pods p "
            "JOIN rounds r ON r.id = p.round_id WHERE r.run_id = ? ORDER BY p.round_id, p.name",
            (run_id,),
        )

    def visits_frame(self, run_id: str) -> pd.DataFrame:
        return self.frame("SELECT * FROM visits WHERE run_id = ? ORDER BY id", (run_id,))

    def arms_frame(self, run_id: str) -> pd.DataFrame:
        return self.frame("SELECT * FROM arms WHERE run_id = ?", (run_id,))

    def events_frame(self, run_id: str) -> pd.DataFrame:
        """Each round's events, summed per (reason, type): the round's pod count is its size."""
        return self.frame(
            "SELECT e.round_id, e.reason, e.type, SUM(e.count) AS events, r.arm, r.size, "
            "r.warmup, r.accepted FROM events e JOIN rounds r ON r.id = e.round_id "
            "WHERE r.run_id = ? GROUP BY e.round_id, e.reason, e.type ORDER BY e.round_id",
            (run_id,),
        )

    def metric_deltas_frame(self, run_id: str) -> pd.DataFrame:
        return self.frame(
            "SELECT m.*, r.arm, r.size, r.block, r.warmup, r.accepted FROM metric_deltas m "
            "JOIN rounds r ON r.id = m.round_id WHERE r.run_id = ?",
            (run_id,),
        )


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip() and not _only_comments(s)]


def _only_comments(chunk: str) -> bool:
    return all(not ln.strip() or ln.strip().startswith("--") for ln in chunk.splitlines())


def _encode(value: Any) -> Any:
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, bool):
        return int(value)
    return value
