"""clusterloader2's PodStartupLatency summaries as rounds: one summary file = one round.

What clusterloader2 writes (learned from its source, github.com/kubernetes/perf-tests:
``clusterloader2/pkg/measurement/common/slos/pod_startup_latency.go``,
``clusterloader2/pkg/measurement/util/{perftype,latency_metric,phase_latency}.go``,
``clusterloader2/pkg/test/simple_test_executor.go``): into ``--report-dir`` it writes one file per
gathered measurement, named ``<summary>_<test name>_<RFC 3339 time>.json``, where the summary of
the PodStartupLatency measurement is ``PodStartupLatency_<identifier>`` (and the same with a
``Stateless``/``Stateful`` prefix for those subsets, which we do not read). The file is PerfData:

    {"version": "1.0", "dataItems": [{"data": {"Perc50": ms, "Perc90": ms, "Perc99": ms},
                                      "unit": "ms", "labels": {"Metric": "pod_startup"}}, ...]}

with one data item per transition (``create_to_schedule``, ``schedule_to_run``,
``run_to_watch``, ``schedule_to_watch``, ``pod_startup``, ``create_to_run``). Percentiles are
nearest-rank over the pods, as ours.

Mapping: the ``pod_startup`` item (pod created -> seen Running by the watch; the SLI closest
to ours) gives ``p50_s`` (Perc50) and ``p99_s`` (Perc99). Perc90 has no column of ours, and the
file has neither P95 nor the slowest pod (batch ready), nor the number of pods: ``--size``
says it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from abtest.config.numbers import finite, shown_number
from abtest.errors import UserError
from abtest.ingest.common import (
    ArmGlob,
    Ingested,
    match_runs,
    parse_time,
    read_json,
    rounds_frame,
)

FILE_GLOB = "PodStartupLatency_*.json"
TRANSITION = "pod_startup"
EXPECTED = (
    'clusterloader2 PerfData: {"version": ..., "dataItems": [{"data": {"Perc50", '
    f'"Perc90", "Perc99"}}, "unit": "ms", "labels": {{"Metric": "{TRANSITION}"}}}}]}}'
)
COLUMNS = {"Perc50": "p50_s", "Perc99": "p99_s"}
NOTE = (
    "clusterloader2 PodStartupLatency gives Perc50/Perc90/Perc99 of pod_startup (create to "
    "watched Running) per round: analysed as p50_s and p99_s; it has no P95 and no batch ready."
)


def load_clusterloader2(root: Path, arms: Sequence[ArmGlob], *, size: int | None) -> Ingested:
    """Every PodStartupLatency file in every arm's run directories; blocks in time order."""
    if size is None:
        raise UserError(
            "clusterloader2's PodStartupLatency files do not say how many pods a round had",
            "--clusterloader2",
            "give --size N (pods per round)",
        )
    runs = match_runs(root, arms, "--clusterloader2")
    rows: list[dict[str, Any]] = []
    for arm, directories in runs.items():
        files = [f for d in directories for f in sorted(d.glob(FILE_GLOB))]
        if not files:
            raise UserError(
                f"arm {arm!r}: no {FILE_GLOB} in {', '.join(str(d) for d in directories)}",
                str(root),
                "point --arm at clusterloader2 report directories",
            )
        stamped = sorted(((_file_time(f), f) for f in files), key=lambda item: item[0])
        for block, (_, path) in enumerate(stamped, start=1):
            rows.append({"arm": arm, "size": size, "block": str(block), **_quantiles(path)})
    return Ingested(rounds_frame(rows, str(root)), f"clusterloader2 reports in {root}", [NOTE])


def _quantiles(path: Path) -> dict[str, float]:
    data = read_json(path, EXPECTED)
    items = data.get("dataItems") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UserError(f"no dataItems list; expected {EXPECTED}", str(path))
    for item in items:
        labels = item.get("labels") if isinstance(item, dict) else None
        if isinstance(labels, dict) and labels.get("Metric") == TRANSITION:
            return _item_values(item, path)
    raise UserError(
        f"no data item with labels.Metric {TRANSITION!r}; expected {EXPECTED}", str(path)
    )


def _item_values(item: dict[str, Any], path: Path) -> dict[str, float]:
    unit = item.get("unit")
    scale = {"ms": 1e-3, "s": 1.0}.get(str(unit))
    if scale is None:
        raise UserError(f'{TRANSITION} unit {unit!r}, expected "ms"', str(path))
    data = item.get("data")
    values: dict[str, float] = {}
    for key, column in COLUMNS.items():
        value = data.get(key) if isinstance(data, dict) else None
        number = finite(value)  # 401 digits or 1e400 (read as infinity) are no latency
        if number is None or number <= 0:
            raise UserError(
                f"{TRANSITION} {key} is {shown_number(value)}, expected a positive number of "
                f"{unit}",
                str(path),
            )
        values[column] = number * scale
    return values


def _file_time(path: Path) -> pd.Timestamp:
    # <summary>_<test name>_<RFC 3339 time>.json: the time is after the last underscore.
    text = path.stem.rsplit("_", 1)[-1]
    stamp = parse_time(text)
    if stamp is None:
        raise UserError(
            f"the file name ends in {text!r}, not the RFC 3339 time clusterloader2 appends",
            str(path),
            "keep clusterloader2's file names: rounds are ordered into blocks by that time",
        )
    return stamp
