"""Read and check a rounds CSV (the format of `abtest analyze` and `abtest regress --csv`).

One row per accepted round: ``arm``, ``size`` and optional ``block`` columns, and one column
per metric (``batch_ready_s``, ``p50_s``, ``p95_s``, ``p99_s``; any non-empty subset), times in
seconds. Other columns are ignored by the analysis. Every problem is a UserError naming the
file, the line and the column, so the user can fix the file without guessing.

Refused rather than guessed at:

- a column named twice in the header (pandas would silently rename the second copy and the
  analysis would ignore it);
- duplicate rows (every column equal, numbers compared by value so ``2.00`` repeats ``2.0``):
  a pasted-twice round would count as two and shrink the interval. Two real rounds with
  identical times are told apart by any column that differs, e.g. ``round`` or ``block``;
- an empty or bad cell in a metric that is analysed. Metrics not asked for are not read, so a
  gap there does not reject the file.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from abtest.config.csv_cells import unescape_cell
from abtest.config.numbers import METRIC_S
from abtest.config.numbers import SIZE as SIZE_RANGE
from abtest.config.paths import read_input
from abtest.errors import UserError
from abtest.stats.frame import ARM, BLOCK, METRICS, SIZE

# frame.attrs keys: the file's metric columns, and the error of each one with a bad cell.
FILE_METRICS = "abtest_file_metrics"
UNREADABLE = "abtest_unreadable_metrics"
# the rounds of years of nightly sweeps are a few MB; nothing bigger is a rounds CSV
MAX_CSV_BYTES = 256 * 2**20
HEADER_HINT = f"the header needs arm,size[,block] and at least one of {', '.join(METRICS)}"


def load_rounds_csv(path: Path) -> pd.DataFrame:
    """The rounds of ``path`` as a frame: arm (str), size (int), block (str, if given), metrics.

    Raises UserError for a missing or empty file, a column named twice, missing columns, exact
    duplicate rows, empty or bad arm/size/block cells, and a file with fewer than 2 rounds.
    A metric column with an empty, non-numeric or non-positive cell is left out of the frame
    and its error kept (``frame.attrs``): ``require_metrics`` raises it when that metric is
    asked for, so a gap in a metric nobody analyses does not reject the file.
    """
    where = str(path)
    if not path.exists():
        raise UserError("no such file", where, "give the path of a rounds CSV")
    text = _read(path, where)
    raw = _parse_cells(text, where)
    _check_header(text, where)
    raw = _rows_by_line(raw)
    _require_arm_and_size(raw, where)
    _unescape_text_columns(raw)
    present = _metric_columns(raw, where)
    _require_two_rounds(raw, where)
    _check_duplicates(raw, where)
    return _rounds_frame(raw, present, where)


def _parse_cells(text: str, where: str) -> pd.DataFrame:
    """Every cell as text, blank lines kept, so errors can quote the cell and its line."""
    _refuse_wide_rows(text, where)
    try:
        return pd.read_csv(
            io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False
        )
    except pd.errors.EmptyDataError:
        raise UserError("the file is empty", where, HEADER_HINT) from None
    except pd.errors.ParserError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"not a readable CSV ({reason})", where, HEADER_HINT) from None


def _refuse_wide_rows(text: str, where: str) -> None:
    """A row with more cells than the header: pandas would take its first cells as the row's
    index and shift every column, so it is refused with its line, not read."""
    try:
        rows = csv.reader(io.StringIO(text))
        header = next(rows, None)
        for row in rows:
            if header is not None and len(row) > len(header):
                line = rows.line_num
                raise UserError(
                    f"line {line} has {len(row)} cells, the header {len(header)}",
                    where,
                    "give every row the header's columns; a stray comma adds one",
                )
    except csv.Error:
        return  # pandas' own reading names what is wrong with the file


def _rows_by_line(raw: pd.DataFrame) -> pd.DataFrame:
    """Names and cells stripped, each row indexed by its line in the file, blank rows dropped."""
    raw.columns = [str(c).strip() for c in raw.columns]
    raw = raw.fillna("").apply(lambda column: column.str.strip())
    # Data row i is on line i + 2 (line 1 is the header); keep that before dropping blank lines.
    raw.index = raw.index + 2
    return raw[(raw != "").any(axis=1)]


def _require_arm_and_size(raw: pd.DataFrame, where: str) -> None:
    missing = [c for c in (ARM, SIZE) if c not in raw.columns]
    if missing:
        raise UserError(f"no column {', '.join(missing)}", where, HEADER_HINT)


def _unescape_text_columns(raw: pd.DataFrame) -> None:
    for column in (ARM, BLOCK):  # an arm abtest wrote as '+X (a spreadsheet's formula mark)
        if column in raw.columns:
            raw[column] = raw[column].map(unescape_cell)


def _metric_columns(raw: pd.DataFrame, where: str) -> list[str]:
    present = [m for m in METRICS if m in raw.columns]
    if not present:
        raise UserError("no metric column", where, HEADER_HINT)
    return present


def _require_two_rounds(raw: pd.DataFrame, where: str) -> None:
    if raw.empty:
        raise UserError("no rounds, only a header", where, "add one row per measured round")
    if len(raw) < 2:
        raise UserError(
            "only one round: nothing to estimate noise from",
            where,
            "measure at least 2 rounds per arm (5 blocks is a good start)",
        )


def _rounds_frame(raw: pd.DataFrame, present: list[str], where: str) -> pd.DataFrame:
    """The typed frame of ``raw``'s rows; a metric with a bad cell is left out, its error kept
    in ``attrs`` for :func:`require_metrics`."""
    rounds = pd.DataFrame(index=raw.index)
    rounds[ARM] = _text_column(raw, ARM, where)
    rounds[SIZE] = _size_column(raw, where)
    if BLOCK in raw.columns:
        rounds[BLOCK] = _text_column(raw, BLOCK, where)
    unreadable: dict[str, UserError] = {}
    for metric in present:
        try:
            rounds[metric] = _time_column(raw, metric, where)
        except UserError as exc:  # kept, and raised if this metric is asked for
            unreadable[metric] = exc
    rounds = rounds.reset_index(drop=True)
    rounds.attrs[FILE_METRICS] = present
    rounds.attrs[UNREADABLE] = unreadable
    return rounds


def require_metrics(rounds: pd.DataFrame, asked: Sequence[str] | None, where: str) -> list[str]:
    """The metrics to analyse: ``asked`` (names, in order, no repeats) or, when None, every
    metric column of the file. Raises UserError for a metric the file does not have, or the
    error of a bad cell in a metric asked for (file, line, column)."""
    present: list[str] = rounds.attrs.get(FILE_METRICS) or [
        m for m in METRICS if m in rounds.columns
    ]
    unreadable: dict[str, UserError] = rounds.attrs.get(UNREADABLE) or {}
    chosen = present if asked is None else list(dict.fromkeys(asked))
    for name in chosen:
        if name not in present:
            raise UserError(
                f"unknown metric {name!r}",
                f"--metric (file {where})",
                f"choose from the metric columns in the file: {', '.join(present)}",
            )
        if name in unreadable:
            raise unreadable[name]
    return chosen


def _read(path: Path, where: str) -> str:
    """The file's text, read once (abtest.config.paths.read_input: a regular file, never a
    FIFO or a device), a UTF-8 byte-order mark dropped as a spreadsheet writes one."""
    data = read_input(path, where, "give the path of a rounds CSV", MAX_CSV_BYTES)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            f"not a readable CSV ('utf-8' codec can't decode byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start}, line {line})",
            where,
            "save the file as UTF-8",
        ) from None


def _check_header(text: str, where: str) -> None:
    """Refuse a column named twice: pandas renames the copy (``p95_s.1``) and it is lost."""
    header = next(csv.reader(io.StringIO(text, newline="")), [])
    seen: set[str] = set()
    for name in (h.strip() for h in header):
        if name and name in seen:
            raise UserError(
                f"column {name!r} appears twice in the header",
                f"{where}, line 1, column {name}",
                "keep one column per name",
            )
        seen.add(name)


def _parsed(cell: str) -> str:
    """A numeric cell by its value (``2.00`` and ``2.0`` are one time), any other as text."""
    try:
        return repr(float(cell))
    except ValueError:
        return cell


def _check_duplicates(raw: pd.DataFrame, where: str) -> None:
    """Refuse rows identical in every column: a round pasted twice would count twice.

    Rows are compared by parsed values, not text: a copy re-saved as ``2.0`` instead of
    ``2.00`` is still a copy (issue 26). Arm and block stay text: the analysis tells arms and
    blocks apart by their text, so ``1`` and ``1.0`` there are different blocks.
    """
    keys = raw.copy()
    for column in keys.columns:
        if column not in (ARM, BLOCK):
            keys[column] = keys[column].map(_parsed)
    repeated = keys[keys.duplicated(keep=False)]
    if repeated.empty:
        return
    first_copy = keys.duplicated(keep="first")
    line = int(keys.index[first_copy.to_numpy()][0])
    twin = next(
        int(other)
        for other in repeated.index
        if other != line and repeated.loc[other].equals(keys.loc[line])
    )
    count = int(first_copy.sum())
    more = f" ({count} duplicate rows in all)" if count > 1 else ""
    raise UserError(
        f"duplicate rounds: line {line} repeats line {twin} (same values in every column){more}",
        where,
        "remove the copy, or if they are distinct rounds with equal times, add a column "
        "that tells them apart (e.g. round or block)",
    )


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
    # in range before the cast: 1e30 would wrap to a negative int64 ("-9223372036854775808 pods")
    good = parsed.notna() & (parsed >= 1) & (parsed <= SIZE_RANGE.maximum)
    good &= parsed == np.floor(parsed.where(good, 0))
    _refuse_bad_row(
        values, good, f"size must be a whole number of pods from 1 to {SIZE_RANGE.maximum:g}", where
    )
    return parsed.astype(np.int64)


def _time_column(raw: pd.DataFrame, metric: str, where: str) -> pd.Series:
    values = raw[metric]
    parsed = pd.to_numeric(values, errors="coerce")
    # a start-up time: 1e308 overflows the statistics, a subnormal 1e-320 has no finite log
    good = parsed.notna() & np.isfinite(parsed) & (parsed > 0)
    good &= (parsed >= METRIC_S.minimum) & (parsed <= METRIC_S.maximum)
    _refuse_bad_row(
        values,
        good,
        f"{metric} must be a positive number of seconds from {METRIC_S.minimum:g} to "
        f"{METRIC_S.maximum:g}",
        where,
    )
    return parsed.astype(np.float64)


def _refuse_bad_row(values: pd.Series, good: pd.Series, rule: str, where: str) -> None:
    """Raise, naming the first row whose value in column ``values`` breaks ``rule``."""
    if not good.all():
        line = int(values.index[(~good).to_numpy()][0])
        raise UserError(
            f"{rule}, got {_cell(values[line])}",
            f"{where}, line {line}, column {values.name}",
            "fix or remove that row",
        )


def _cell(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
