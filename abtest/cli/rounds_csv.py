"""Read and check a rounds CSV (the format of `abtest analyze` and `abtest regress --csv`).

One row per accepted round: ``arm``, ``size`` and optional ``block`` columns, and one column
per metric (``batch_ready_s``, ``p50_s``, ``p95_s``, ``p99_s``; any non-empty subset), times in
seconds. Other columns are ignored. Every problem is a UserError naming the file, the line and
the column, so the user can fix the file without guessing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from abtest.errors import UserError
from abtest.stats.frame import ARM, BLOCK, METRICS, SIZE

HEADER_HINT = f"the header needs arm,size[,block] and at least one of {', '.join(METRICS)}"


def load_rounds_csv(path: Path) -> pd.DataFrame:
    """The rounds of ``path`` as a frame: arm (str), size (int), block (str, if given), metrics.

    Raises UserError for a missing or empty file, missing columns, empty or non-numeric cells,
    non-positive times and a file with fewer than 2 rounds.
    """
    where = str(path)
    if not path.is_file():
        raise UserError("no such file", where, "give the path of a rounds CSV")
    try:
        # Everything as text, blank lines kept, so errors can quote the cell and its line.
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise UserError("the file is empty", where, HEADER_HINT) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"not a readable CSV ({reason})", where, HEADER_HINT) from None
    raw.columns = [str(c).strip() for c in raw.columns]
    raw = raw.fillna("").apply(lambda column: column.str.strip())
    # Data row i is on line i + 2 (line 1 is the header); keep that before dropping blank lines.
    raw.index = raw.index + 2
    raw = raw[(raw != "").any(axis=1)]

    missing = [c for c in (ARM, SIZE) if c not in raw.columns]
    if missing:
        raise UserError(f"no column {', '.join(missing)}", where, HEADER_HINT)
    metrics = [m for m in METRICS if m in raw.columns]
    if not metrics:
        raise UserError("no metric column", where, HEADER_HINT)
    if raw.empty:
        raise UserError("no rounds, only a header", where, "add one row per measured round")
    if len(raw) < 2:
        raise UserError(
            "only one round: nothing to estimate noise from",
            where,
            "measure at least 2 rounds per arm (5 blocks is a good start)",
        )

    rounds = pd.DataFrame(index=raw.index)
    rounds[ARM] = _text_column(raw, ARM, where)
    rounds[SIZE] = _size_column(raw, where)
    if BLOCK in raw.columns:
        rounds[BLOCK] = _text_column(raw, BLOCK, where)
    for metric in metrics:
        rounds[metric] = _time_column(raw, metric, where)
    return rounds.reset_index(drop=True)


def _text_column(raw: pd.DataFrame, column: str, where: str) -> pd.Series:
    values = raw[column]
    empty = values == ""
    if empty.any():
        line = int(values.index[empty.to_numpy()][0])
        raise UserError(
            f"empty {column}",
            f"{where}, line {line}, column {column}",
            f"give every round its {column}",
        )
    return values.astype(str)


def _size_column(raw: pd.DataFrame, where: str) -> pd.Series:
    values = raw[SIZE]
    parsed = pd.to_numeric(values, errors="coerce")
    good = parsed.notna() & (parsed > 0) & (parsed == np.floor(parsed))
    if not good.all():
        line = int(values.index[(~good).to_numpy()][0])
        raise UserError(
            f"size must be a positive whole number of pods, got {values[line]!r}",
            f"{where}, line {line}, column {SIZE}",
            "fix or remove that row",
        )
    return parsed.astype(np.int64)


def _time_column(raw: pd.DataFrame, metric: str, where: str) -> pd.Series:
    values = raw[metric]
    parsed = pd.to_numeric(values, errors="coerce")
    good = parsed.notna() & np.isfinite(parsed) & (parsed > 0)
    if not good.all():
        line = int(values.index[(~good).to_numpy()][0])
        raise UserError(
            f"{metric} must be a positive number of seconds, got {values[line]!r}",
            f"{where}, line {line}, column {metric}",
            "fix or remove that row",
        )
    return parsed.astype(np.float64)
