"""The results database: a SQLite file (standard library, the default) or a shared
PostgreSQL server (``postgresql://...``, psycopg 3), with one schema and one list of
migrations on both. Every write commits before returning, so a finished round is stored
before the next one starts."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from abtest.config.k8s_names import run_id_problem
from abtest.config.locations import parse_location
from abtest.config.paths import check_db_path
from abtest.errors import StoreConflict, StoreError, UserError
from abtest.store.pg import PgConnection, pg_ddl, redact
from abtest.store.schema import MIGRATIONS, SCHEMA_VERSION
from abtest.store.tables import Arms, Rounds, Runs, Visits

#: what --db / ABTEST_DB name: a SQLite file, a postgresql:// URL, or None for the default
DbTarget = Path | str | None


ENV = "ABTEST_DB"


def _env_location() -> Path | str | None:
    """ABTEST_DB parsed (abtest.config.locations): a file, a URL, or None when unset."""
    env = os.environ.get(ENV)
    return parse_location(env, f"${ENV}") if env else None


def default_path() -> Path:
    """The default SQLite file (ABTEST_DB when it names a file)."""
    env = _env_location()
    if isinstance(env, Path):
        return env
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "abtest" / "results.sqlite"


def resolve(target: DbTarget = None) -> Path | str:
    """The database to open: a URL (its scheme lower-cased), a file path as a Path; None is
    ABTEST_DB, else the per-user SQLite file. Another scheme or a libpq keyword string is
    one UserError that never shows the text (abtest.config.locations.parse_location)."""
    if target is None or target == "":
        env = _env_location()
        return env if env is not None else default_path()
    if isinstance(target, Path):
        return target.expanduser()
    return parse_location(target, "--db")


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


# SQLite files this process has open, with how many connections each. POSIX record locks
# belong to the process: closing *any* descriptor of a database file drops the locks every
# connection of this process holds on it, and a reader that keeps its connection then reads a
# stale snapshot (SQLite's "How To Corrupt" page, 2.2). So the file is opened by hand (the
# header check) only while no connection of ours has it open.
_OPEN: dict[Path, int] = {}
_OPEN_LOCK = threading.Lock()


def _opened(path: Path, change: int) -> int:
    key = path.resolve()
    with _OPEN_LOCK:
        count = _OPEN.get(key, 0) + change
        if count > 0:
            _OPEN[key] = count
        else:
            _OPEN.pop(key, None)
        return count


def _open_sqlite(path: Path, where: str, given: bool) -> sqlite3.Connection:
    """The SQLite file, checked first (abtest.config.paths.check_db_path): a folder, a file that is
    not a database or a --db in a missing folder is one UserError, not a traceback; a new
    file is created 0600 (_create_private)."""
    if _opened(path, 0) == 0:
        check_db_path(path, where)
    if given and not path.parent.is_dir():
        # a typo in --db must not leave a new folder tree behind
        raise UserError(
            f"folder {path.parent} does not exist",
            where,
            "create it, or give a path in an existing folder",
        )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _create_private(path)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def _not_a_database(path: Path | str, where: str, exc: sqlite3.DatabaseError) -> UserError:
    return UserError(
        f"cannot use {path} as the results database: {exc}",
        where,
        "give the results database, or a new file name",
    )


#: what a sweep does after a store fault (its finished rounds are committed, one by one)
RESUME_HINT = "the statement in flight was not stored (a sweep continues with --resume RUN_ID)"


def sqlite_fault(name: str, exc: sqlite3.OperationalError) -> StoreError:
    """A SQLite file that stopped taking statements mid-run (disk full, read-only, locked by
    another writer past the timeout, an I/O error): one operational line, exit 4, like a lost
    PostgreSQL connection (abtest.store.pg), never a traceback."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreError(f"results database {name}: {first}; {RESUME_HINT}")


@contextmanager
def _sqlite_faults(name: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise sqlite_fault(name, exc) from exc


class Store:
    """One connection to the results database, migrated to SCHEMA_VERSION on open.

    ``name`` is the database in messages (a URL without its password), ``path`` the SQLite
    file (a shared database has none), ``location`` what opens it again (another thread's
    own connection: ``Store(store.location)``)."""

    def __init__(self, path: DbTarget = None) -> None:
        self.location = resolve(path)
        given = path is not None and path != ""
        where = "--db" if given else "results database ($ABTEST_DB or the default)"
        self.conn: Any
        if isinstance(self.location, str):
            self.dialect = "postgresql"
            self.name = redact(self.location)
            self._path: Path | None = None
            self.conn = PgConnection(self.location)
        else:
            self.dialect = "sqlite"
            self.name = str(self.location)
            self._path = self.location
            try:
                self.conn = _open_sqlite(self.location, where, given)
            except sqlite3.DatabaseError as exc:
                raise _not_a_database(self.location, where, exc) from None
            _opened(self.location, +1)
        try:
            self._migrate()
        except BaseException as exc:
            self._close()
            if isinstance(exc, sqlite3.DatabaseError) and not self.postgres:
                raise _not_a_database(self.location, where, exc) from None
            raise
        # the typed API of the sweep's tables (abtest.store.tables): no SQL above the store
        self.runs = Runs(self)
        self.arms = Arms(self)
        self.visits = Visits(self)
        self.rounds = Rounds(self)

    @property
    def path(self) -> Path:
        """The SQLite file (TypeError for a shared database: use ``name`` or ``location``)."""
        if self._path is None:
            raise TypeError(f"{self.name} is a database server, not a file")
        return self._path

    @property
    def postgres(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def insertion_order(self) -> str:
        """ORDER BY this for the order rows of a table without an id were inserted in."""
        # PostgreSQL has no rowid; ctid is insertion order for rows never updated since (an
        # arm marked failed may move: only the display order is at stake, never a number)
        return "ctid" if self.postgres else "rowid"

    def _version(self) -> int:
        if self.postgres:
            return int(self.conn.schema_version())
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise UserError(
                f"results database is schema v{version}, this abtest knows up to v{SCHEMA_VERSION}",
                self.name,
                "upgrade abtest, or point ABTEST_DB/--db at another database",
            )

    def _migrate(self) -> None:
        version = self._version()
        self._refuse_newer(version)
        if version == SCHEMA_VERSION:
            return
        with self.transaction():
            if self.postgres:
                # another controller may be migrating the same fresh database right now
                self.conn.lock_migrations()
                version = self._version()
                self._refuse_newer(version)
            for target in range(version, SCHEMA_VERSION):
                for statement in _statements(MIGRATIONS[target]):
                    self.conn.execute(pg_ddl(statement) if self.postgres else statement)
                if self.postgres:
                    self.conn.set_schema_version(target + 1)
                else:
                    self.conn.execute(f"PRAGMA user_version = {target + 1}")

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """All or nothing: the statements inside commit together (a round, its pods, events
        and metrics), and a reader never sees part of them."""
        if self.postgres:
            with self.conn.transaction() as tx:
                yield tx
            return
        with _sqlite_faults(self.name):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                _rollback(self.conn)
                raise
            self.conn.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one committed state: a report never mixes a round that another
        controller committed between two of its queries with the state before it."""
        if self.postgres:
            with self.conn.snapshot():
                yield
            return
        if self.conn.in_transaction:
            yield
            return
        with _sqlite_faults(self.name):
            self.conn.execute("BEGIN")  # deferred: the WAL snapshot starts with the first read
            try:
                yield
            finally:
                _rollback(self.conn)

    @staticmethod
    def exists(path: DbTarget = None) -> bool:
        """Is there a results database yet (without creating one)? A server is taken to
        have one: connecting creates the schema, as opening a new file does."""
        target = resolve(path)
        return isinstance(target, str) or target.exists()

    def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.conn is None:
            return
        self.conn.close()
        self.conn = None
        if self._path is not None:
            _opened(self._path, -1)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- generic helpers ----------------------------------------------------------------

    def insert(self, table: str, row: Mapping[str, Any]) -> int:
        cols = list(row)
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
        try:
            with self.transaction() as c:
                cur = c.execute(sql, [_encode(row[k]) for k in cols])
        except sqlite3.IntegrityError as exc:  # PostgreSQL's is translated in abtest.store.pg
            raise StoreConflict(str(exc)) from exc
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

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows that index by column name and by position (``sqlite3.Row`` or its like)."""
        with _sqlite_faults(self.name):
            return list(self.conn.execute(sql, params))

    def frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        if self.postgres:
            cur = self.conn.execute(sql, params)
            # what pandas' read_sql_query does for a DB-API cursor, without its warning
            return pd.DataFrame.from_records(
                [tuple(r) for r in cur.rows], columns=cur.columns, coerce_float=True
            )
        with _sqlite_faults(self.name):
            return pd.read_sql_query(sql, self.conn, params=list(params))

    # --- runs ---------------------------------------------------------------------------

    def run_row(self, run_id: str) -> Any:
        if problem := run_id_problem(run_id):
            raise UserError(problem, self.name, "see `abtest runs`")
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise UserError(f"no run {run_id!r}", self.name, "see `abtest runs`")
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
        """The run's arms in the order the run stored them (its plan's order)."""
        return self.frame(
            f"SELECT * FROM arms WHERE run_id = ? ORDER BY {self.insertion_order}", (run_id,)
        )

    def events_frame(self, run_id: str) -> pd.DataFrame:
        """Each round's events, summed per (reason, type): the round's pod count is its size."""
        return self.frame(
            # the CAST: PostgreSQL's SUM of integers is numeric (Decimal in Python)
            "SELECT e.round_id, e.reason, e.type, CAST(SUM(e.count) AS BIGINT) AS events, "
            "r.arm, r.size, r.warmup, r.accepted FROM events e JOIN rounds r ON r.id = e.round_id "
            "WHERE r.run_id = ? GROUP BY e.round_id, e.reason, e.type, r.arm, r.size, r.warmup, "
            "r.accepted ORDER BY e.round_id",
            (run_id,),
        )

    def metric_deltas_frame(self, run_id: str) -> pd.DataFrame:
        return self.frame(
            "SELECT m.*, r.arm, r.size, r.block, r.warmup, r.accepted FROM metric_deltas m "
            "JOIN rounds r ON r.id = m.round_id WHERE r.run_id = ?",
            (run_id,),
        )


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what failed; SQLite may have rolled it back itself already (a full disk
    does), and the error that got us here is the one to report."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


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
