"""A results database that fails at a chosen point, for the store-fault tests.

:class:`FaultyStore` is a real :class:`~abtest.store.db.Store` (a SQLite file) whose statements
start failing when a scripted point is reached, and keep failing, as a stopped server or a full
disk does, until :meth:`FaultyStore.heal`. A point is a predicate on ``(operation, table)``:
``insert``, ``insert_many``, ``update`` name the table written; ``query`` and ``frame`` the
first table their SQL names; ``transaction`` (a round's rows, written together) names none.
``after`` lets that many matching statements through first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from abtest.errors import StoreConnectionLost, StoreError
from abtest.store.db import Store

#: the store errors a sweep may meet, as the store raises them (SQLite messages translated)
FAULTS: dict[str, Callable[[str], StoreError]] = {
    "connection lost": lambda name: StoreConnectionLost(
        f"results database connection lost ({name}): terminating connection due to "
        "administrator command"
    ),
    "disk full": lambda name: StoreError(f"results database {name}: database or disk is full"),
    "read-only": lambda name: StoreError(
        f"results database {name}: attempt to write a readonly database"
    ),
    "locked": lambda name: StoreError(f"results database {name}: database is locked"),
}

Point = Callable[[str, str], bool]
_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE)\s+([a-z_]+)", re.IGNORECASE)


def writes(table: str) -> Point:
    """Any write to ``table``."""
    return lambda op, t: op in ("insert", "insert_many", "update") and t == table


def anything() -> Point:
    return lambda op, t: True


class FaultyStore(Store):
    """A Store that raises ``FAULTS[kind]`` from the point ``fail_at`` on (see the module)."""

    def __init__(self, path: Path | str) -> None:
        self.point: Point | None = None
        self.down = False
        self._inner = False  # in insert/update: their own transaction is not a point
        super().__init__(path)
        self.kind = "connection lost"
        self.left = 0
        self.failures = 0

    def fail_at(self, point: Point, kind: str = "connection lost", after: int = 0) -> FaultyStore:
        self.point, self.kind, self.left = point, kind, after
        return self

    def heal(self) -> None:
        """The server is back, the disk has room again."""
        self.point, self.down = None, False

    def _check(self, op: str, table: str) -> None:
        if not self.down and self.point is not None and self.point(op, table):
            if self.left > 0:
                self.left -= 1
            else:
                self.down = True
        if self.down:
            self.failures += 1
            raise FAULTS[self.kind](self.name)

    def insert(self, table: str, row: Mapping[str, Any]) -> int:
        self._check("insert", table)
        self._inner = True
        try:
            return super().insert(table, row)
        finally:
            self._inner = False

    def insert_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._check("insert_many", table)
        self._inner = True
        try:
            super().insert_many(table, rows)
        finally:
            self._inner = False

    def update(self, table: str, key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        self._check("update", table)
        self._inner = True
        try:
            super().update(table, key, values)
        finally:
            self._inner = False

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        if not self._inner:
            self._check("transaction", "")
        with super().transaction() as tx:
            yield tx

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self._check("query", _table(sql))
        return super().query(sql, params)

    def frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        self._check("frame", _table(sql))
        return super().frame(sql, params)


def _table(sql: str) -> str:
    match = _TABLE.search(sql)
    return match.group(1).lower() if match else ""
