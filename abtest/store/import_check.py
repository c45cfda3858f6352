"""An export file checked against the database's own schema before anything is written.

An export is untrusted input (a colleague's file, a file edited by hand): every table and
column it may fill is taken from the schema of the database it goes into (:func:`read_schema`),
never from the file's keys; every value is checked against its column's type and the range the
tool ever writes; every reference (a round's visit, a round's arm, a row's run) resolves inside
the file; ids, node, arm and pod names are names (the whole string, no ``/``, ``..`` or control
character). What is wrong is a list of :class:`Problem` (the JSON path and what), so one
refusal names every bad value at once, not only the first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from abtest.config.numbers import finite, shown_number

if TYPE_CHECKING:
    from abtest.store.db import Store

#: the tables an export fills, in the order rows are inserted; a round's own tables after it
RUN_TABLES = ("runs", "arms", "visits", "rounds")
ROUND_CHILDREN = ("pods", "events", "metric_deltas", "round_gaps")
# columns the import sets itself (the run's id, the renumbered round), never from the file
IMPLIED = {table: frozenset({"round_id"}) for table in ROUND_CHILDREN}
MAX_PROBLEMS = 20  # a file wrong everywhere: the first ones, and how many more

INT64 = 2**63 - 1
MAX_SECONDS = 1e8  # 3 years: no round, restart, cleanup or gap between resumed rounds is longer
MAX_WALL = 1e11  # unix seconds (year 5138)
MAX_COUNT = 10**9
_INFINITE = (float("inf"), float("-inf"))

# the whole string (\A...\Z: `$` would let a trailing newline through)
_DNS_SUBDOMAIN = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_RUN_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_ARM = re.compile(r"\A[A-Za-z0-9_+][A-Za-z0-9_.+:=@-]{0,252}\Z")
_WORD = re.compile(r"\A[a-z][a-z_-]{0,31}\Z")


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # text | integer | real | blob
    required: bool  # NOT NULL and no default: the file must give it


Schema = dict[str, dict[str, Column]]


@dataclass(frozen=True)
class Problem:
    path: str  # runs[0].rounds[3].batch_ready_s
    what: str


def read_schema(store: Store) -> Schema:
    """The export's tables as the database defines them (the file never names a column)."""
    out: Schema = {}
    for table in (*RUN_TABLES, *ROUND_CHILDREN):
        if store.postgres:
            rows = store.query(
                "SELECT column_name, data_type, is_nullable = 'NO', column_default IS NOT NULL "
                "FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = ? ORDER BY ordinal_position",
                (table,),
            )
        else:
            rows = store.query(
                'SELECT name, type, "notnull" = 1, dflt_value IS NOT NULL '
                "FROM pragma_table_info(?) ORDER BY cid",
                (table,),
            )
        out[table] = {
            str(name): Column(str(name), _kind(str(sqltype)), bool(notnull) and not default)
            for name, sqltype, notnull, default in rows
        }
    return out


def _kind(sqltype: str) -> str:
    t = sqltype.lower()
    if "int" in t:
        return "integer"
    if "real" in t or "double" in t or "float" in t:
        return "real"
    if "blob" in t or "bytea" in t:
        return "blob"
    return "text"


def shown(value: Any, limit: int = 40) -> str:
    """A value from the file as a message may quote it: short, one line (repr escapes)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def key_path(path: str, key: str) -> str:
    return (
        f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else f"{path}[{shown(key)}]"
    )


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


# --- what one value may be ------------------------------------------------------------------
Rule = Callable[[Any], str | None]  # the problem with a (non-null, typed) value, or None


def _name(pattern: re.Pattern[str], what: str) -> Rule:
    def check(value: Any) -> str | None:
        if not pattern.search(value) or ".." in value:
            return f"{shown(value)} is not a valid {what}"
        return None

    return check


def _between(low: float, high: float) -> Rule:
    def check(value: Any) -> str | None:
        if low <= value <= high:
            return None
        return f"{shown_number(value)} is outside [{low:g}, {high:g}]"

    return check


class _Unbounded(ValueError):
    """A number in JSON text no column could hold: what to say about it."""


def _json_text(shape: type | None) -> Rule:
    def check(value: Any) -> str | None:
        try:
            parsed = json.loads(
                value, parse_constant=_refuse_constant, parse_float=_float, parse_int=_int
            )
        except _Unbounded as exc:
            return f"holds {exc}"
        except (ValueError, RecursionError):
            return "is not JSON text (or holds NaN/Infinity)"
        if shape is not None and not isinstance(parsed, shape):
            return f"must be JSON text of {'an object' if shape is dict else 'an array'}"
        return None

    return check


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


# The numbers inside a plan or settings: what a double and a 64-bit integer hold, as every
# number abtest writes there came from one (1e400 would be read back as infinity).
def _float(text: str) -> float:
    if (number := finite(float(text))) is None:
        raise _Unbounded(f"{shown(text)}, which is not a finite number")
    return number


def _int(text: str) -> int:
    number = int(text)  # ValueError beyond 4300 digits: "not JSON text"
    if abs(number) > INT64:
        raise _Unbounded(f"{shown_number(number)}, an integer outside 64 bits")
    return number


def _timestamp(value: Any) -> str | None:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return f"{shown(value)} is not an ISO 8601 time"
    return None


NODE = _name(_DNS_SUBDOMAIN, "node name (a Kubernetes name)")
ARM = _name(_ARM, "arm name")
SECONDS = _between(0, MAX_SECONDS)
COUNT = _between(0, MAX_COUNT)
FLAG = _between(0, 1)
WALL = _between(0, MAX_WALL)

#: (table, column) -> its rule beyond the column's type; "*" is any table
RULES: Mapping[tuple[str, str], Rule] = {
    ("runs", "id"): _name(_RUN_ID, "run id"),
    ("runs", "kind"): _name(_WORD, "run kind"),
    ("runs", "status"): _name(_WORD, "run status"),
    ("runs", "plan_json"): _json_text(dict),
    ("runs", "env_json"): _json_text(dict),
    ("arms", "name"): ARM,
    ("arms", "status"): _name(_WORD, "arm status"),
    ("arms", "on_json"): _json_text(list),
    ("arms", "settings_json"): _json_text(dict),
    ("visits", "arm"): ARM,
    ("visits", "block"): COUNT,
    ("visits", "position"): COUNT,
    ("visits", "applied"): FLAG,
    ("visits", "verified_json"): _json_text(None),
    ("rounds", "arm"): ARM,
    ("rounds", "size"): _between(1, 10**6),
    ("rounds", "block"): COUNT,
    ("rounds", "ordinal"): COUNT,
    ("rounds", "warmup"): FLAG,
    ("rounds", "accepted"): FLAG,
    ("rounds", "started_wall"): WALL,
    ("rounds", "submit_rate"): _between(0, 1e9),
    ("rounds", "phases_json"): _json_text(None),
    ("pods", "name"): _name(_DNS_SUBDOMAIN, "pod name (a Kubernetes name)"),
    ("pods", "http_status"): _between(0, 999),
    ("pods", "ready_regressed"): FLAG,
    ("round_gaps", "phase"): _name(_WORD, "gap phase"),
    ("round_gaps", "summed"): FLAG,
    ("round_gaps", "seq"): COUNT,
}
_COUNT_COLUMNS = {"pods_ready", "restarts", "ready_regressions", "sandbox_failures",
                  "create_failures", "create_retries", "watch_restarts", "watch_relisted",
                  "attempts", "count"}  # fmt: skip


def rule_of(table: str, column: str) -> Rule | None:
    if (table, column) in RULES:
        return RULES[(table, column)]
    if column == "node_name":
        return NODE
    if column in _COUNT_COLUMNS:
        return COUNT
    if column.endswith("_s") or column == "seconds":
        return SECONDS
    if column.startswith("server_"):
        return WALL
    if column.endswith("_at"):
        return _timestamp
    return None


def value_problem(column: Column, table: str, value: Any) -> str | None:
    """What is wrong with ``value`` in ``table.column`` (None: it may be stored)."""
    if value is None:
        return "is null, and the column needs a value" if column.required else None
    if column.kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, not {type_name(value)}"
        if abs(value) > INT64:
            return f"{shown_number(value)} is outside a 64-bit integer"
    elif column.kind == "real":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, not {type_name(value)}"
        if finite(value) is None:  # NaN, 1e400 (read as infinity), 401 digits
            why = " (1e400 and the like are read as infinity)" if value in _INFINITE else ""
            return f"must be a finite number (a double), not {shown_number(value)}{why}"
    elif not isinstance(value, str):  # text (a blob is never exported)
        return f"must be a string, not {type_name(value)}"
    elif problem := text_problem(value):
        return problem
    rule = rule_of(table, column.name)
    return rule(value) if rule is not None else None


def text_problem(value: str) -> str | None:
    """What no database's text column takes: a NUL, or a lone surrogate (JSON's ``"\\udcff"``,
    which is no Unicode character and which neither SQLite nor PostgreSQL can encode)."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds {value[exc.start]!r} at character {exc.start}, which is not Unicode text"
    return None


def stored(column: Column, value: Any) -> Any:
    """The value as the column is given it: an integer in a real column as a float (SQLite
    binds a Python int as a 64-bit integer whatever the column, so 10^20 overflowed)."""
    if column.kind == "real" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# --- the document ---------------------------------------------------------------------------
class Checker:
    """Walks one export document; ``problems`` is what is wrong, in file order."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.problems: list[Problem] = []

    def bad(self, path: str, what: str) -> None:
        self.problems.append(Problem(path, what))

    def items(self, path: str, value: Any, *, required: bool = True) -> list[Any]:
        """``value`` as a JSON array (a missing optional one is empty)."""
        if value is None and not required:
            return []
        if not isinstance(value, list):
            self.bad(path, f"must be an array, not {type_name(value)}")
            return []
        return value

    def obj(self, path: str, value: Any, keys: frozenset[str]) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.bad(path, f"must be an object, not {type_name(value)}")
            return None
        for key in value:
            if key not in keys:
                self.bad(key_path(path, key), "is not a key of an abtest runs export")
        return value

    def row(self, path: str, table: str, value: Any, extra: frozenset[str] = frozenset()) -> bool:
        """One row of ``table``: only its columns, each value typed and in range; ``extra``
        are the keys the document nests under it (a round's pods)."""
        if not isinstance(value, dict):
            self.bad(path, f"must be an object (a row of {table}), not {type_name(value)}")
            return False
        columns = self.schema[table]
        implied = IMPLIED.get(table, frozenset())
        ok = True
        for key in value:
            if key in implied:
                self.bad(key_path(path, key), "is set by the import (the row is nested under it)")
                ok = False
            elif key not in columns and key not in extra:
                self.bad(key_path(path, key), f"is not a column of table {table}")
                ok = False
        for column in columns.values():
            if column.name in implied:
                continue
            if column.name not in value:
                if column.required:
                    self.bad(
                        key_path(path, column.name), "is missing, and the column needs a value"
                    )
                    ok = False
                continue
            if problem := value_problem(column, table, value[column.name]):
                self.bad(key_path(path, column.name), problem)
                ok = False
        return ok

    def unique(self, path: str, seen: dict[Any, str], key: Any, what: str) -> None:
        if key in seen:
            self.bad(path, f"{what} {shown(key)} is already at {seen[key]}")
        else:
            seen[key] = path


_TOP = frozenset({"format", "schema", "runs"})
_RUN = frozenset({"run", "arms", "visits", "rounds"})


def check_document(
    schema: Schema, document: Any, *, format_name: str, version: int
) -> list[Problem]:
    """Everything wrong with ``document`` as an export of ``format_name`` up to schema
    ``version``; empty when every row may be inserted as it is."""
    c = Checker(schema)
    top = c.obj("(the top level)", document, _TOP)
    if top is None:
        return c.problems
    if top.get("format") != format_name:
        c.bad("format", f"must be {format_name!r} (a file made by `abtest runs export`)")
        return c.problems
    given = top.get("schema")
    if isinstance(given, int) and not isinstance(given, bool) and given > version:
        c.bad("schema", f"the export is schema v{given}, this abtest knows up to v{version} "
              "(upgrade abtest)")  # fmt: skip
        return c.problems
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        c.bad("schema", f"must be a schema version from 1 to {version}, not {shown(given)}")
        return c.problems
    run_ids: dict[Any, str] = {}
    for i, item in enumerate(c.items("runs", top.get("runs"))):
        _check_run(c, f"runs[{i}]", item, run_ids)
    return c.problems


def _check_run(c: Checker, path: str, item: Any, run_ids: dict[Any, str]) -> None:
    run = c.obj(path, item, _RUN)
    if run is None:
        return
    row = run.get("run")
    c.row(f"{path}.run", "runs", row)
    run_id = row.get("id") if isinstance(row, dict) else None
    if not isinstance(run_id, str) or RULES[("runs", "id")](run_id) is not None:
        run_id = None  # said above: no row is compared with it
    if run_id is not None:
        c.unique(f"{path}.run.id", run_ids, run_id, "run id")
    arms: dict[Any, str] = {}
    for i, arm in enumerate(c.items(f"{path}.arms", run.get("arms"))):
        where = f"{path}.arms[{i}]"
        if c.row(where, "arms", arm):
            _same_run(c, where, arm, run_id)
            c.unique(f"{where}.name", arms, arm["name"], "arm")
    visits: dict[Any, str] = {}
    for i, visit in enumerate(c.items(f"{path}.visits", run.get("visits"))):
        where = f"{path}.visits[{i}]"
        if c.row(where, "visits", visit):
            _same_run(c, where, visit, run_id)
            _known_arm(c, where, visit, arms)
            if visit.get("id") is None:  # the rounds refer to their visit by it
                c.bad(f"{where}.id", "is missing (the rounds refer to their visit by it)")
            else:
                c.unique(f"{where}.id", visits, visit["id"], "visit id")
    rounds: dict[Any, str] = {}
    for i, rnd in enumerate(c.items(f"{path}.rounds", run.get("rounds"))):
        where = f"{path}.rounds[{i}]"
        if c.row(where, "rounds", rnd, frozenset(ROUND_CHILDREN)):
            _same_run(c, where, rnd, run_id)
            _known_arm(c, where, rnd, arms)
            if rnd.get("id") is not None:
                c.unique(f"{where}.id", rounds, rnd["id"], "round id")
            if rnd.get("visit_id") is not None and rnd["visit_id"] not in visits:
                c.bad(f"{where}.visit_id", f"visit {shown(rnd['visit_id'])} is not in this run")
        if isinstance(rnd, dict):
            for table in ROUND_CHILDREN:
                _check_children(c, f"{where}.{table}", table, rnd.get(table))


def _same_run(c: Checker, path: str, row: dict[str, Any], run_id: Any) -> None:
    if run_id is not None and "run_id" in row and row["run_id"] != run_id:
        c.bad(f"{path}.run_id", f"{shown(row['run_id'])} is not this run's id {shown(run_id)}")


def _known_arm(c: Checker, path: str, row: dict[str, Any], arms: dict[Any, str]) -> None:
    if arms and row.get("arm") not in arms:
        c.bad(f"{path}.arm", f"arm {shown(row.get('arm'))} is not among this run's arms")


# the key of each round's own table within the round (its primary key without round_id)
_CHILD_KEYS = {"pods": ("name",), "round_gaps": ("phase", "part")}


def _check_children(c: Checker, path: str, table: str, value: Any) -> None:
    seen: dict[Any, str] = {}
    key = _CHILD_KEYS.get(table)
    for i, row in enumerate(c.items(path, value, required=False)):
        where = f"{path}[{i}]"
        if c.row(where, table, row) and key is not None:
            c.unique(where, seen, tuple(row.get(k) for k in key), f"{table} row")
