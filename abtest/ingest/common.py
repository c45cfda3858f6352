"""What the readers of other tools' output share: arm globs, run directories, the rounds frame.

A reader turns one run directory of another tool into one round (or a few): a row of the tidy
rounds frame that ``abtest analyze`` reads from CSV (``abtest.ingest.rounds_csv``): ``arm``,
``size``, ``block`` and the metric columns, times in seconds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from abtest.config.numbers import METRIC_S
from abtest.config.numbers import SIZE as SIZE_RANGE
from abtest.config.paths import read_input
from abtest.errors import UserError
from abtest.stats.frame import ARM, BLOCK, METRICS, SIZE
from abtest.stats.percentiles import nearest_rank


@dataclass(frozen=True)
class ArmGlob:
    """``--arm NAME=GLOB``: the run directories under the data directory that are arm NAME."""

    name: str
    glob: str


@dataclass
class Ingested:
    """Rounds read from another tool, and what the reader wants the user to know about them."""

    rounds: pd.DataFrame
    source: str
    notes: list[str] = field(default_factory=list)


def parse_arm_globs(values: Sequence[str] | None, flag_of_source: str) -> list[ArmGlob]:
    """``NAME=GLOB`` options, each name once. At least two arms, or there is nothing to compare."""
    arms: list[ArmGlob] = []
    for value in values or ():
        name, sep, pattern = value.partition("=")
        name, pattern = name.strip(), pattern.strip()
        if sep and pattern and _escapes(pattern):
            raise UserError(
                f"--arm {name}={pattern}: the GLOB leaves the data directory",
                "--arm",
                "give a GLOB relative to the data directory, without '..' or a leading '/'",
            )
        if not sep or not name or not pattern:
            raise UserError(
                f"--arm {value!r} is not NAME=GLOB",
                "--arm",
                "e.g. --arm baseline='base-*' --arm qps3='qps3-*'",
            )
        if any(a.name == name for a in arms):
            raise UserError(f"arm {name!r} is given twice", "--arm", "one --arm per arm name")
        arms.append(ArmGlob(name, pattern))
    if len(arms) < 2:
        raise UserError(
            f"{flag_of_source} needs at least two --arm NAME=GLOB",
            "--arm",
            "one per arm, each GLOB matching that arm's run directories under the data directory",
        )
    return arms


def match_runs(root: Path, arms: Sequence[ArmGlob], flag: str) -> dict[str, list[Path]]:
    """The run directories of every arm (sorted by path); a directory in two arms is an error."""
    if not root.is_dir():
        raise UserError("no such directory", str(root), f"give {flag} the directory of the runs")
    owner: dict[Path, str] = {}
    runs: dict[str, list[Path]] = {}
    inside = root.resolve()
    for arm in arms:
        if _escapes(arm.glob):
            raise UserError(
                f"--arm {arm.name}={arm.glob}: the GLOB leaves the data directory",
                "--arm",
                "give a GLOB relative to the data directory, without '..' or a leading '/'",
            )
        # a symlinked run directory pointing elsewhere is outside too
        found = sorted(
            p for p in root.glob(arm.glob) if p.is_dir() and p.resolve().is_relative_to(inside)
        )
        if not found:
            raise UserError(
                f"--arm {arm.name}={arm.glob} matches no directory",
                str(root),
                "the GLOB is relative to the data directory and matches run directories",
            )
        for path in found:
            if path in owner:
                raise UserError(
                    f"{path} matches both arm {owner[path]!r} and arm {arm.name!r}",
                    "--arm",
                    "make the globs disjoint",
                )
            owner[path] = arm.name
        runs[arm.name] = found
    return runs


# a kube-burner run's podLatencyMeasurement of 100k pods is ~40 MB; nothing bigger is a run
MAX_JSON_BYTES = 256 * 2**20


def read_json(path: Path, expected: str) -> Any:
    """A JSON file, or one UserError naming the file and what it should have been."""
    if not path.exists():
        raise UserError(f"missing file (expected {expected})", str(path))
    data = read_input(path, str(path), f"expected {expected}", MAX_JSON_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"cannot read (not UTF-8 text at byte {exc.start}); expected {expected}", str(path)
        ) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise UserError(f"JSON nested too deeply; expected {expected}", str(path)) from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); expected {expected}",
            str(path),
        ) from None


def _escapes(pattern: str) -> bool:
    """Does a run GLOB reach outside the data directory (absolute, or through '..')?"""
    return pattern.startswith(("/", "~")) or ".." in Path(pattern).parts


def latency_metrics(latencies_s: Sequence[float]) -> dict[str, float]:
    """Our per-round metrics from per-pod latencies: nearest-rank P50/P95/P99 and batch ready.

    Batch ready is the slowest pod's latency: these tools time each pod from its own creation,
    not from the start of the round's submissions as ``abtest batch`` does.
    """
    return {
        "batch_ready_s": max(latencies_s),
        "p50_s": nearest_rank(latencies_s, 50),
        "p95_s": nearest_rank(latencies_s, 95),
        "p99_s": nearest_rank(latencies_s, 99),
    }


def rounds_frame(rows: Sequence[dict[str, Any]], source: str) -> pd.DataFrame:
    """The tidy frame, columns in rounds_csv's order (arm, size, block, metrics present)."""
    if len(rows) < 2:
        raise UserError(
            "fewer than 2 usable rounds: nothing to estimate noise from",
            source,
            "give every arm at least 2 runs (5 is a good start)",
        )
    frame = pd.DataFrame(list(rows))
    metrics = [m for m in METRICS if m in frame.columns]
    columns = [ARM, SIZE, *([BLOCK] if BLOCK in frame.columns else []), *metrics]
    frame = frame[columns].copy()
    frame[ARM] = frame[ARM].astype(str)
    frame[SIZE] = frame[SIZE].astype("int64")
    if BLOCK in frame.columns:
        frame[BLOCK] = frame[BLOCK].astype(str)
    for metric in metrics:
        frame[metric] = frame[metric].astype("float64")
        for value in frame[metric].dropna():
            if problem := METRIC_S.problem(float(value)):
                raise UserError(f"{metric} {problem}", source, "check the runs' latency values")
    for value in frame[SIZE]:
        if problem := SIZE_RANGE.problem(int(value)):
            raise UserError(f"size {problem}", source, "check the runs' pod counts")
    return frame.reset_index(drop=True)


def parse_time(text: object) -> pd.Timestamp | None:
    """An ISO 8601 / RFC 3339 time (nanoseconds allowed, as Go writes them) in UTC, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        stamp = pd.Timestamp(text)
    except ValueError:
        return None
    if not isinstance(stamp, pd.Timestamp) or pd.isna(stamp):
        return None
    return stamp if stamp.tzinfo else stamp.tz_localize("UTC")
