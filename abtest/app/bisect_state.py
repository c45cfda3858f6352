"""A stored bisection, read back whole for ``abtest bisect --resume`` and `abtest report`.

A bisection's state is the ``bisect`` entry of its runs' stored plans (:mod:`abtest.app.
bisect_search` writes them): the first run's holds the settings, every run's the measurement it
makes and, once decided, its record. A database someone else wrote, or a run imported from a
file, can hold any JSON there, so the state is parsed into typed records and checked whole
before anything is built or measured, under the rules the command line's options obey (the
same checks, called here): a bad value is one UserError naming the bisection and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from abtest.analysis.bisect import ENTRY, KIND, Span, StepRecord
from abtest.app.bisect_builds import checked_range
from abtest.config import numbers as num
from abtest.config.kubelet_series import BuildName, parse_build_name
from abtest.config.margin import margin_problem
from abtest.config.playbook import Playbook, load_playbook
from abtest.engine.regress_rounds import look_schedule
from abtest.errors import UserError
from abtest.stats.bisect import BAD, GOOD, OUTCOMES, middle, next_range
from abtest.store.db import Store

T = TypeVar("T")
#: --metric names and the rounds column each decides on
METRICS = {"batch-ready": "batch_ready_s", "p95": "p95_s"}
END_OUTCOMES = ("PASS", "FAIL", "INCONCLUSIVE")  # the regression gate's verdicts
STEP_OUTCOMES = OUTCOMES[:4]  # GOOD, BAD, SPREAD, UNRESOLVED (MORE is never stored)
END_SPANS = ("bad vs good",)
STEP_SPANS = ("mid vs low", "high vs mid")
WALL_S = num.Range(0, math.inf, unit="s")
INDEX = num.Range(0, 10_000, integer=True)
TODO = "not what `abtest bisect` stores: start a new bisection, without --resume"


def check_metric(name: str, where: str) -> str:
    """The rounds column a --metric name decides on."""
    if name not in METRICS:
        raise UserError(f"unknown metric {name!r}", where, f"one of {', '.join(METRICS)}")
    return METRICS[name]


def check_size(size: int, pb: Playbook, where: str) -> int:
    num.SIZE.check(size, where)
    if size not in pb.sizes:
        raise UserError(
            f"size {size} is not in playbook {pb.name}",
            where,
            f"the playbook measures {', '.join(map(str, pb.sizes))} pods",
        )
    return size


@dataclass(frozen=True)
class BisectParameters:
    """What the whole search uses, as stored in its first run (so --resume is the same)."""

    builds: tuple[tuple[str, str | None], ...]  # (name, series folder or None), as stored
    #: the same builds, each parsed once where it was read (the options, the stored state)
    values: tuple[BuildName, ...]
    playbook: str
    profiles: tuple[str, ...]
    metric: str  # a rounds column: a value of METRICS
    size: int
    margin_pct: float
    confidence: float
    first_look: int
    max_blocks: int
    seed: int

    def build(self, name: str) -> BuildName:
        """The build of the range named ``name`` (ValueError for a name not in it)."""
        return self.values[self.names.index(name)]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.builds)

    @property
    def looks(self) -> list[int]:
        return look_schedule(self.first_look, self.max_blocks)


def stored_form(build: BuildName) -> tuple[str, str | None]:
    """A build as BisectParameters keeps it: its name, and its series' folder when it has one."""
    return build.name, str(build.folder) if build.folder and build.series else None


def settings_json(settings: BisectParameters) -> dict[str, Any]:
    return {
        "builds": [list(b) for b in settings.builds],
        "playbook": settings.playbook,
        "profiles": list(settings.profiles),
        "metric": settings.metric,
        "size": settings.size,
        "margin_pct": settings.margin_pct,
        "confidence": settings.confidence,
        "first_look": settings.first_look,
        "max_blocks": settings.max_blocks,
        "seed": settings.seed,
    }


@dataclass(frozen=True)
class Pending:
    """The measurement that started and did not decide: its run is resumed, not started anew."""

    index: int
    run_id: str
    wall_s: float  # the node time it had spent


@dataclass(frozen=True)
class StoredBisection:
    root: str
    settings: BisectParameters
    records: tuple[StepRecord, ...]  # decided, index 0 (the ends) first
    pending: Pending | None


@dataclass(frozen=True)
class _Fields:
    """One JSON object of the stored state. Every getter refuses a missing or bad value with
    one line naming the bisection and ``label + key`` (``step 2's spans``)."""

    root: str
    label: str
    data: Mapping[str, Any]

    def fail(self, key: str, what: str) -> NoReturn:
        raise UserError(f"{self.label}{key}: {what}", f"bisection {self.root}", TODO)

    def get(self, key: str) -> Any:
        if key not in self.data:
            self.fail(key, "missing")
        value = self.data[key]
        if _too_big(value):
            self.fail(key, f"{_type(value)} is out of range")
        return value

    def number(self, key: str, rng: num.Range) -> Any:
        value = self.get(key)
        if problem := rng.problem(value):
            self.fail(key, problem)
        return value

    def checked(self, key: str, problem: Callable[[Any], str | None]) -> float:
        value = self.get(key)
        if found := problem(value):
            self.fail(key, found)
        return float(value)

    def text(self, key: str) -> str:
        return _text(self, key, self.get(key))

    def items(self, key: str, count: int | None = None, what: str = "") -> list[Any]:
        value = self.get(key)
        if not isinstance(value, list):
            self.fail(key, f"expected a list, got {_type(value)}")
        if count is not None and len(value) != count:
            self.fail(key, f"{len(value)} value(s), expected {count}{what}")
        return value

    def via(self, key: str, check: Callable[..., T], *args: Any) -> T:
        """``check(*args)``, a command line rule, its refusal shown as this field's."""
        try:
            return check(*args)
        except UserError as exc:
            self.fail(key, exc.what)


def _text(f: _Fields, key: str, value: Any) -> str:
    """A name or a path: no control character (it would reach a terminal or a file name) and
    no lone surrogate (no file system or terminal encodes one)."""
    if not isinstance(value, str) or not value:
        f.fail(key, f"expected a non-empty string, got {_type(value)}")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        f.fail(key, f"{_type(value)} holds a control character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        f.fail(key, f"{_type(value)} holds a lone surrogate")
    return value


def _type(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _object(root: str, name: str, prefix: str, value: Any) -> _Fields:
    """``value`` as the object ``name``, its fields labelled ``prefix + key``."""
    if not isinstance(value, dict):
        what = f"{name}: expected an object, got {_type(value)}"
        raise UserError(what, f"bisection {root}", TODO)
    return _Fields(root, prefix, value)


def read_bisection(store: Store, run_id: str) -> StoredBisection:
    """The bisection whose first run is ``run_id``: its settings, decided records and the
    undecided measurement, if any, each checked (UserError at the first bad value)."""
    store.run_row(run_id)  # "no run ..." for an unknown id
    entries = [(r, e) for r, e in store.runs.with_plan_entry(KIND, ENTRY) if isinstance(e, dict)]
    head = next((e for r, e in entries if r == run_id), None)
    if head is None or "settings" not in head:
        raise UserError(
            f"run {run_id} is not a bisection",
            "--resume",
            "give the first run `abtest bisect` printed (kind bisect, see `abtest runs`)",
        )
    settings = parse_settings(run_id, head["settings"])
    mine = [(r, e) for r, e in entries if r == run_id or e.get("root") == run_id]
    return _measurements(run_id, settings, mine)


def parse_settings(root: str, value: Any) -> BisectParameters:
    f = _object(root, "settings", "settings.", value)
    builds, values = _builds(f)
    max_blocks = f.number("max_blocks", num.MAX_ROUNDS)
    first_look = f.number("first_look", num.ROUNDS)
    if first_look > max_blocks:
        f.fail("first_look", f"{first_look} is above max_blocks {max_blocks}")
    f.via("first_look", look_schedule, first_look, max_blocks)
    metric = f.text("metric")
    if metric not in METRICS.values():
        f.fail("metric", f"{metric!r} is not a column --metric decides on ({_columns()})")
    profiles = f.items("profiles")
    if not profiles:
        f.fail("profiles", "no profile")
    return BisectParameters(
        builds,
        values,
        f.text("playbook"),
        tuple(_text(f, f"profiles[{i}]", p) for i, p in enumerate(profiles)),
        metric,
        f.number("size", num.SIZE),
        f.checked("margin_pct", margin_problem),
        f.checked("confidence", num.confidence_problem),
        first_look,
        max_blocks,
        f.number("seed", num.SEED),
    )


def _columns() -> str:
    return ", ".join(f"{col} for {name}" for name, col in METRICS.items())


def _builds(f: _Fields) -> tuple[tuple[tuple[str, str | None], ...], tuple[BuildName, ...]]:
    """The range as stored and as builds, each build's name read as --builds reads it, under
    --builds' range rule."""
    builds: list[BuildName] = []
    forms: list[tuple[str, str | None]] = []
    for i, pair in enumerate(f.items("builds")):
        key = f"builds[{i}]"
        if not isinstance(pair, list) or len(pair) != 2:
            f.fail(key, f"expected [name, series folder or null], got {_type(pair)}")
        name = _text(f, key, pair[0])
        build = f.via(key, partial(parse_build_name, paths=False), name, key)
        if pair[1] is not None:
            folder = Path(_text(f, f"{key}'s folder", pair[1]))
            if build.series is None or not folder.is_absolute() or folder.name != build.series:
                f.fail(f"{key}'s folder", f"{pair[1]!r} is not an absolute path to series {build}")
            build = BuildName(build.release, build.series, folder, build.prefix)
        builds.append(build)
        forms.append((build.name, pair[1]))
    f.via("builds", checked_range, builds)
    return tuple(forms), tuple(builds)


def _measurements(
    root: str, settings: BisectParameters, entries: Sequence[tuple[str, dict[str, Any]]]
) -> StoredBisection:
    """The decided records (0 .. k-1, each the step the ones before it lead to) and at most
    one undecided measurement, k."""
    by_index: dict[int, tuple[str, dict[str, Any]]] = {}
    for run, entry in entries:
        f = _Fields(root, f"run {run}'s bisect entry: ", entry)
        index = f.number("index", INDEX)
        if (index == 0) != (run == root):
            f.fail("index", f"{index}, but the ends are measured in run {root}")
        if index in by_index:
            f.fail("index", f"measurement {index} is also run {by_index[index][0]}'s")
        by_index[index] = (run, entry)
    records: list[StepRecord] = []
    pending: Pending | None = None
    for index in sorted(by_index):
        run, entry = by_index[index]
        if pending is not None or index != len(records):
            raise UserError(
                f"{_label(index)}: run {run} measured it with {_label(len(records))} undecided",
                f"bisection {root}",
                TODO,
            )
        f = _Fields(root, _owner(index) + " ", entry)
        expected = _next_builds(root, settings, records, index)
        builds = tuple(f.items("builds", len(expected), _builds_are(index)))
        if builds != expected:
            f.fail("builds", _unexpected(settings, builds, expected))
        if entry.get("record") is None:
            spent = float(f.number("wall_s", WALL_S)) if "wall_s" in entry else 0.0
            pending = Pending(index, run, spent)
        else:
            records.append(parse_record(root, settings, run, index, entry["record"], expected))
    return StoredBisection(root, settings, tuple(records), pending)


def _label(index: int) -> str:
    return "the ends" if index == 0 else f"step {index}"


def _owner(index: int) -> str:
    return "the ends'" if index == 0 else f"step {index}'s"


def _builds_are(index: int) -> str:
    return " (good, bad)" if index == 0 else " (low, mid, high)"


def _next_builds(
    root: str, settings: BisectParameters, records: Sequence[StepRecord], index: int
) -> tuple[str, ...]:
    """The builds measurement ``index`` measures after ``records``, as the search goes."""
    names = settings.names
    if index == 0:
        return names[0], names[-1]
    low, high = 0, len(names) - 1
    last = records[-1]
    for rec in records[1:]:
        outcome = STEP_OUTCOMES.index(rec.outcome)
        if outcome in (GOOD, BAD):
            low, high = next_range(low, high, names.index(rec.builds[1]), outcome)
    if (last.outcome not in ("FAIL", "GOOD", "BAD")) or high - low < 2:
        raise UserError(
            f"{_label(index)}: the search ended at {_label(index - 1)} ({last.outcome})",
            f"bisection {root}",
            TODO,
        )
    mid = middle(low, high)
    return names[low], names[mid], names[high]


def _unexpected(
    settings: BisectParameters, builds: tuple[Any, ...], expected: tuple[str, ...]
) -> str:
    outside = [b for b in builds if b not in settings.names]
    if outside:
        return f"{outside[0]!r} is not a build of the range"
    return f"{', '.join(builds)}, but the steps before it lead to {', '.join(expected)}"


def parse_record(
    root: str, settings: BisectParameters, run: str, index: int, value: Any, builds: tuple[str, ...]
) -> StepRecord:
    """A decided measurement's record, consistent with its entry, run and settings."""
    f = _object(root, f"{_owner(index)} record", _owner(index) + " ", value)
    if f.number("index", INDEX) != index:
        f.fail("index", f"{f.get('index')}, but its run {run} measured {_label(index)}")
    if f.text("run_id") != run:
        f.fail("run_id", f"{f.get('run_id')!r}, but it is stored in run {run}")
    if tuple(f.items("builds", len(builds), _builds_are(index))) != builds:
        f.fail("builds", _unexpected(settings, tuple(f.get("builds")), builds))
    outcome = f.text("outcome")
    allowed = END_OUTCOMES if index == 0 else STEP_OUTCOMES
    if outcome not in allowed:
        f.fail("outcome", f"{outcome!r} is not one of {', '.join(allowed)}")
    looks = settings.looks
    blocks = f.number("blocks", num.MAX_ROUNDS)
    look = f.number("looks", num.Range(1, len(looks), integer=True, unit="looks"))
    if blocks != looks[look - 1]:
        f.fail("blocks", f"{blocks}, but look {look} is at {looks[look - 1]} blocks")
    return StepRecord(
        index,
        run,
        builds,
        outcome,
        _spans(f, END_SPANS if index == 0 else STEP_SPANS),
        blocks,
        look,
        float(f.number("wall_s", WALL_S)),
        f.checked("level", num.probability_problem),
    )


def _spans(f: _Fields, names: tuple[str, ...]) -> tuple[tuple[str, Span], ...]:
    """Each span as [name, estimate, low, high]: finite percentages, the bounds null when the
    interval has none, the low one not above the high one."""
    out = []
    for i, item in enumerate(f.items("spans", len(names), f" ({', '.join(names)})")):
        key = f"spans[{i}]"
        if not isinstance(item, list) or len(item) != 4:
            shown = f"{len(item)} values" if isinstance(item, list) else _type(item)
            f.fail(key, f"{shown}, expected 4 (name, estimate, low, high)")
        name, est, lo, hi = item
        if name != names[i]:
            f.fail(key, f"named {name!r}, expected {names[i]!r}")
        bounds = [None if v is None else _finite(f, key, v) for v in (lo, hi)]
        if (bounds[0] is None) != (bounds[1] is None):
            f.fail(key, "one bound without the other")
        if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
            f.fail(key, f"low bound {lo} above high bound {hi}")
        out.append((names[i], Span(_finite(f, key, est), bounds[0], bounds[1])))
    return tuple(out)


def _too_big(value: Any) -> bool:
    """An integer no float holds (JSON has no limit): every rule below would overflow on it."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63


def _finite(f: _Fields, key: str, value: Any) -> float:
    if _too_big(value):
        f.fail(key, f"{_type(value)} is out of range")
    if problem := num.Range(-math.inf, math.inf).problem(value):
        f.fail(key, problem)
    return float(value)


def stored_playbook(stored: StoredBisection) -> Playbook:
    """The playbook a resumed bisection measures with, its size still one of the playbook's."""
    f = _Fields(stored.root, "settings.", settings_json(stored.settings))
    pb = f.via("playbook", load_playbook, stored.settings.playbook)
    f.via("size", check_size, stored.settings.size, pb, "size")
    return pb
