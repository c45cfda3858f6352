"""Typed reads and writes of the sweep's tables, so the layers above hold no SQL.

Each class wraps one table (or one question about it) of a :class:`~abtest.store.db.Store`;
the store makes one of each (``store.runs``, ``store.arms``, ``store.visits``,
``store.rounds``). Every write commits before returning, like the store's own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from abtest.config.json_object import json_object

if TYPE_CHECKING:
    import pandas as pd


class Store(Protocol):
    """The store's generic reads and writes these tables are written in: what
    :class:`abtest.store.db.Store` (which makes one of each table) offers them. A protocol,
    so that this module needs nothing of db and db can import it."""

    def insert(self, table: str, row: Mapping[str, Any]) -> int: ...
    def insert_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None: ...
    def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any]) -> None: ...
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...
    def frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame: ...
    def run_row(self, run_id: str) -> Any: ...
    def transaction(self) -> AbstractContextManager[Any]: ...


_ENV_LOCK = threading.Lock()

# (block, arm, size, warm-up): one round of a run's schedule on one node
RoundKey = tuple[int, str, int, bool]


def _insert_sql(table: str, cols: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"


def _latest_seconds(
    store: Store, table: str, column: str, where: str, params: Sequence[Any], limit: int
) -> list[float]:
    """``column`` (seconds) of the latest ``limit`` rows of ``table`` matching ``where``, newest
    first: the recent durations a plan's time estimate is made from."""
    rows = store.query(
        f"SELECT {column} FROM {table} WHERE {where} ORDER BY id DESC LIMIT ?", (*params, limit)
    )
    return [float(r[0]) for r in rows]


def now_iso() -> str:
    """A stored time: UTC, to the millisecond, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Runs:
    def __init__(self, store: Store) -> None:
        self.store = store

    def describe(self, run_id: str, *, catalog: str, design: str, seed: int) -> None:
        """What a sweep measures: its catalog, design and block-order seed."""
        self.store.update(
            "runs", {"id": run_id}, {"catalog_name": catalog, "design": design, "seed": seed}
        )

    def add(self, run_id: str, row: Mapping[str, Any]) -> None:
        """A new run; StoreConflict when the id is taken (another controller's run)."""
        self.store.insert("runs", {"id": run_id, "created_at": now_iso(), **row})

    def finish(self, run_id: str, status: str, stop_reason: str | None) -> None:
        self.store.update(
            "runs",
            {"id": run_id},
            {"status": status, "finished_at": now_iso(), "stop_reason": stop_reason},
        )

    def merge_env(self, run_id: str, key: str, node: str, value: Any) -> None:
        """Set ``env[key][node]`` in the run's stored environment (what a node's pre-flight
        learned, e.g. the kubelet builds its arms run). Nodes of a fleet run in threads of
        one process: the lock keeps one node's read-modify-write from losing another's."""
        with _ENV_LOCK:
            row = self.store.run_row(run_id)
            env = json_object(row["env_json"]) or {}
            part = env.get(key)
            env[key] = {**(part if isinstance(part, dict) else {}), node: value}
            self.store.update("runs", {"id": run_id}, {"env_json": json.dumps(env, default=str)})

    def reopen(self, run_id: str) -> None:
        """A resumed run is running again, with no stop reason."""
        self.store.update("runs", {"id": run_id}, {"status": "running", "stop_reason": None})

    def plan(self, run_id: str) -> dict[str, Any]:
        """The run's stored plan (schedule, options, looks); {} for a run without one."""
        try:
            stored = json.loads(self.store.run_row(run_id)["plan_json"] or "{}")
        except (TypeError, ValueError, RecursionError):  # junk (a hand edit, an old import)
            return {}
        return stored if isinstance(stored, dict) else {}

    def with_plan_entry(self, kind: str, key: str) -> list[tuple[str, Any]]:
        """(run id, its plan's ``key`` entry) of every run of ``kind`` whose plan has one,
        oldest first (a bisection finds its steps by the entry they carry)."""
        rows = self.store.query(
            "SELECT id, plan_json FROM runs WHERE kind = ? ORDER BY created_at, id", (kind,)
        )
        found = []
        for row in rows:
            try:
                plan = json.loads(row["plan_json"] or "{}")
            except (TypeError, ValueError, RecursionError):
                continue
            if isinstance(plan, dict) and key in plan:
                found.append((str(row["id"]), plan[key]))
        return found

    def set_plan_entry(self, run_id: str, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` in the run's plan (the other entries stay)."""
        stored = self.plan(run_id)
        stored[key] = value
        self.store.update("runs", {"id": run_id}, {"plan_json": json.dumps(stored, default=str)})


@dataclass(frozen=True)
class ArmRow:
    """An arm as a run stores it: the factors it turns on and the settings applied."""

    name: str
    on: Collection[str]
    settings: Mapping[str, Any]


class Arms:
    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, run_id: str, arms: Iterable[ArmRow]) -> None:
        self.store.insert_many(
            "arms",
            [
                {
                    "run_id": run_id,
                    "name": a.name,
                    "on_json": sorted(a.on),
                    "settings_json": dict(a.settings),
                }
                for a in arms
            ],
        )

    def fail(self, run_id: str, name: str, failure: str) -> None:
        """The arm could not be applied: the run skips it from now on (also on --resume)."""
        self.store.update(
            "arms", {"run_id": run_id, "name": name}, {"status": "failed", "failure": failure}
        )

    def failed(self, run_id: str) -> dict[str, str]:
        """Arm name -> why it failed, for the run's failed arms."""
        rows = self.store.query(
            "SELECT name, failure FROM arms WHERE run_id = ? AND status = 'failed'", (run_id,)
        )
        return {str(r[0]): str(r[1]) for r in rows}


class Visits:
    """A visit: one arm applied once on one node in one block, its rounds after it."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def begin(self, run_id: str, *, node: str, block: int, position: int, arm: str) -> int:
        """A visit starts (before the node is touched); returns its id."""
        return self.store.insert(
            "visits",
            {
                "run_id": run_id,
                "node_name": node,
                "block": block,
                "position": position,
                "arm": arm,
                "started_at": now_iso(),
            },
        )

    def applied(
        self,
        visit_id: int,
        *,
        restart_to_healthz_s: float | None,
        restart_to_ready_s: float | None,
        restart_to_verified_s: float | None,
        verified: Mapping[str, Any],
        config_sha256: str | None,
    ) -> None:
        """The arm is in effect: the restart's stages and what the running kubelet showed."""
        self.store.update(
            "visits",
            {"id": visit_id},
            {
                "applied": 1,
                "restart_to_healthz_s": restart_to_healthz_s,
                "restart_to_ready_s": restart_to_ready_s,
                "restart_to_verified_s": restart_to_verified_s,
                "verified_json": json.dumps(verified, default=str),
                "config_sha256": config_sha256,
            },
        )

    def failed(self, visit_id: int, error: str) -> None:
        self.store.update("visits", {"id": visit_id}, {"error": error, "finished_at": now_iso()})

    def finish(self, visit_id: int) -> None:
        self.store.update("visits", {"id": visit_id}, {"finished_at": now_iso()})

    def restart_times(self, node_name: str, limit: int = 50) -> list[float]:
        """Restart-to-verified seconds of the node's latest applied visits, newest first."""
        return _latest_seconds(
            self.store,
            "visits",
            "restart_to_verified_s",
            "node_name = ? AND applied = 1 AND restart_to_verified_s IS NOT NULL",
            (node_name,),
            limit,
        )


class Rounds:
    """The stored rounds: one written with every row that hangs off it, and questions about
    them (:func:`abtest.batch.record.record_round` says what a round's rows are)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(
        self,
        row: Mapping[str, Any],
        children: Iterable[tuple[str, Sequence[str], Sequence[Sequence[Any]]]],
    ) -> int:
        """One round and its rows in the tables keyed by it (``(table, columns, rows)``, each
        row without its ``round_id``) in one transaction, committed before returning: a crash
        never leaves half a round. Returns the new rounds.id."""
        with self.store.transaction() as conn:
            round_id = int(conn.execute(_insert_sql("rounds", list(row)), list(row.values()))
                           .lastrowid or 0)  # fmt: skip
            for table, cols, rows in children:
                if rows:
                    conn.executemany(
                        _insert_sql(table, ["round_id", *cols]), [(round_id, *r) for r in rows]
                    )
        return round_id

    def done_keys(self, run_id: str, node_name: str) -> set[RoundKey]:
        """The rounds of the run already on disk for this node (what --resume skips)."""
        rows = self.store.query(
            "SELECT block, arm, size, warmup FROM rounds WHERE run_id = ? AND node_name = ?",
            (run_id, node_name),
        )
        return {(int(r[0]), str(r[1]), int(r[2]), bool(r[3])) for r in rows}

    def cleanup_times(self, node_name: str, limit: int = 50) -> list[float]:
        return _latest_seconds(
            self.store,
            "rounds",
            "cleanup_s",
            "node_name = ? AND cleanup_s IS NOT NULL",
            (node_name,),
            limit,
        )

    def batch_ready_times(self, node_name: str, size: int, limit: int = 50) -> list[float]:
        """Batch ready seconds of the node's latest accepted rounds at ``size``."""
        return _latest_seconds(
            self.store,
            "rounds",
            "batch_ready_s",
            "node_name = ? AND size = ? AND accepted = 1",
            (node_name, size),
            limit,
        )

    def of_latest_runs(
        self, node_name: str, sizes: Sequence[int], metrics: Sequence[str], runs: int
    ) -> pd.DataFrame:
        """Accepted, non-warm-up, blocked rounds at ``sizes`` of the node's latest ``runs``
        runs: columns ``group`` (the run id), block, arm, size and ``metrics``."""
        marks = ", ".join("?" for _ in sizes)
        return self.store.frame(
            f'SELECT run_id AS "group", block, arm, size, {", ".join(metrics)} FROM rounds '
            f"WHERE node_name = ? AND accepted = 1 AND warmup = 0 AND block IS NOT NULL "
            f"AND size IN ({marks}) AND run_id IN (SELECT run_id FROM rounds WHERE node_name = ? "
            "GROUP BY run_id ORDER BY MAX(id) DESC LIMIT ?) ORDER BY id",
            (node_name, *sizes, node_name, runs),
        )
