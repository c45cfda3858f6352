"""kube-burner's local-indexer output as rounds: one kube-burner run directory = one round.

What kube-burner writes (learned from its source, github.com/kube-burner/kube-burner:
``pkg/measurements/pod_latency.go``, ``pkg/measurements/base_measurement.go``,
``pkg/burner/metadata.go``, ``docs/observability/indexing.md``): the ``local`` indexer dumps
every metric into ``<metricsDirectory>/<metricName>.json`` as one JSON array of documents
(default directory ``collected-metrics-<uuid>``).

- ``podLatencyMeasurement-<job>.json``: one document per pod of job ``<job>`` that reached
  Ready, with ``metricName`` = ``podLatencyMeasurement``, ``podName``, ``namespace``, ``jobName``,
  ``timestamp`` (the pod's creationTimestamp) and the latencies from it, in whole milliseconds:
  ``podReadyLatency``, ``containersReadyLatency``, ``initializedLatency``, ``schedulingLatency``,
  ... ; ``churnMetric`` is true for pods created during a churn phase.
- ``jobSummary.json``: one document per job, ``metricName`` = ``jobSummary``, ``timestamp``
  (job start), ``endTimestamp``, ``elapsedTime``, ``uuid``, ``passed``, ``jobConfig`` (with
  ``name``), plus any ``--user-metadata`` merged in at the top level.

Mapping: ``podReadyLatency`` of every non-churn pod becomes the round's P50/P95/P99
(nearest-rank) and batch ready time (the slowest pod); size is the number of pods; a run whose
job did not pass is left out (our rounds are accepted rounds only). Kubernetes stores
creationTimestamp and condition times with one-second resolution, so every latency is a whole
number of seconds give or take one: say so next to any table made from these rounds.
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
    latency_metrics,
    match_runs,
    parse_time,
    read_json,
    rounds_frame,
)

POD_FILE_PREFIX = "podLatencyMeasurement-"
SUMMARY_FILE = "jobSummary.json"
LATENCY_FIELD = "podReadyLatency"
# The per-pod latencies kube-burner writes (podMetric in pod_latency.go), all from creation.
LATENCY_FIELDS = (
    "podReadyLatency",
    "containersReadyLatency",
    "initializedLatency",
    "schedulingLatency",
    "readyToStartContainersLatency",
    "containersStartedLatency",
)
RESOLUTION_NOTE = (
    "kube-burner times pods from API timestamps with one-second resolution: each pod's latency "
    "is uncertain by up to 1 s, so differences well under a second are not resolved."
)
EXPECT_PODS = (
    "kube-burner's local-indexer podLatencyMeasurement file: a JSON array of documents with "
    f'"metricName": "podLatencyMeasurement" and "{LATENCY_FIELD}" in ms'
)
EXPECT_SUMMARY = (
    'kube-burner\'s jobSummary.json: a JSON array of documents with "metricName": "jobSummary", '
    '"timestamp" and "jobConfig"'
)


def load_kube_burner(
    root: Path,
    arms: Sequence[ArmGlob],
    *,
    job: str | None = None,
    block_field: str | None = None,
    size: int | None = None,
    latency: str = LATENCY_FIELD,
) -> Ingested:
    """Rounds of every arm's run directories under ``root``; blocks pair runs in start order.

    ``latency`` is the per-pod field the metrics are made of (podReadyLatency by default)."""
    if latency not in LATENCY_FIELDS:
        raise UserError(
            f"unknown kube-burner latency {latency!r}",
            "--latency",
            f"one of {', '.join(LATENCY_FIELDS)}",
        )
    runs = match_runs(root, arms, "--kube-burner")
    rows: list[dict[str, Any]] = []
    notes = [RESOLUTION_NOTE]
    if latency != LATENCY_FIELD:
        notes.append(f"metrics made of kube-burner's per-pod {latency}, not {LATENCY_FIELD}")
    for arm, directories in runs.items():
        arm_rows: list[tuple[pd.Timestamp, str, dict[str, Any]]] = []
        for directory in directories:
            summary = _job_summary(directory, job)
            if summary.get("passed") is False:
                notes.append(f"left out {directory}: kube-burner says its job did not pass")
                continue
            latencies = _pod_latencies_s(_pod_file(directory, job), latency)
            if size is not None and len(latencies) != size:
                notes.append(
                    f"left out {directory}: {len(latencies)} Ready pods, not the {size} asked for"
                )
                continue
            metrics = latency_metrics(latencies)
            if min(metrics.values()) <= 0:
                raise UserError(
                    "a round's latency is 0 ms: kube-burner's one-second timestamps cannot "
                    "resolve pods this fast, and a ratio of zeros means nothing",
                    str(directory),
                    "measure batches that take seconds, or use abtest batch (millisecond times)",
                )
            block = _block_label(summary, block_field, directory)
            started = _timestamp(summary, directory)
            arm_rows.append((started, block, {"arm": arm, "size": len(latencies), **metrics}))
        # Blocks: the i-th run of every arm in start order, unless a field names the block.
        arm_rows.sort(key=lambda item: item[0])
        for i, (_, block, row) in enumerate(arm_rows, start=1):
            rows.append({**row, "block": block or str(i)})
    return Ingested(rounds_frame(rows, str(root)), f"kube-burner runs in {root}", notes)


def _pod_file(directory: Path, job: str | None) -> Path:
    if job is not None:
        path = directory / f"{POD_FILE_PREFIX}{job}.json"
        if not path.is_file():
            raise UserError(f"no {path.name} (job {job!r})", str(directory), "check --job")
        return path
    found = sorted(directory.glob(f"{POD_FILE_PREFIX}*.json"))
    if not found:
        raise UserError(
            f"no {POD_FILE_PREFIX}<job>.json",
            str(directory),
            "run kube-burner with the podLatency measurement and the local indexer",
        )
    if len(found) > 1:
        jobs = ", ".join(p.name[len(POD_FILE_PREFIX) : -len(".json")] for p in found)
        raise UserError(f"several jobs' pod latencies ({jobs})", str(directory), "choose --job")
    return found[0]


def _documents(path: Path, metric_name: str, expected: str) -> list[dict[str, Any]]:
    data = read_json(path, expected)
    if not isinstance(data, list) or not data:
        raise UserError(f"not a non-empty JSON array; expected {expected}", str(path))
    for i, doc in enumerate(data):
        if not isinstance(doc, dict) or doc.get("metricName") != metric_name:
            got = doc.get("metricName") if isinstance(doc, dict) else type(doc).__name__
            raise UserError(
                f"document {i} is not a {metric_name} document (metricName {got!r}); "
                f"expected {expected}",
                str(path),
            )
    return data


def _pod_latencies_s(path: Path, field: str) -> list[float]:
    latencies: list[float] = []
    for i, doc in enumerate(_documents(path, "podLatencyMeasurement", EXPECT_PODS)):
        if doc.get("churnMetric"):
            continue  # created during churn: not part of the batch start-up
        value = doc.get(field)
        number = finite(value)  # 401 digits or 1e400 (read as infinity) are no latency
        if number is None or number < 0:
            raise UserError(
                f"document {i} ({doc.get('podName', '?')}) has {field} {shown_number(value)}; "
                f"expected {EXPECT_PODS}",
                str(path),
            )
        latencies.append(number / 1000.0)
    if not latencies:
        raise UserError(f"only churn pods; expected {EXPECT_PODS}", str(path))
    return latencies


def _job_summary(directory: Path, job: str | None) -> dict[str, Any]:
    path = directory / SUMMARY_FILE
    docs = _documents(path, "jobSummary", EXPECT_SUMMARY)
    if job is None and len(docs) == 1:
        return docs[0]
    names = [str((d.get("jobConfig") or {}).get("name", "?")) for d in docs]
    if job is None:
        pod_file = _pod_file(directory, None)
        job = pod_file.name[len(POD_FILE_PREFIX) : -len(".json")]
    for doc, name in zip(docs, names, strict=True):
        if name == job:
            return doc
    raise UserError(
        f"no jobSummary document for job {job!r} (jobs: {', '.join(names)})",
        str(path),
        "check --job",
    )


def _timestamp(summary: dict[str, Any], directory: Path) -> pd.Timestamp:
    stamp = parse_time(summary.get("timestamp"))
    if stamp is None:
        raise UserError(
            f"jobSummary timestamp {summary.get('timestamp')!r} is not a time; "
            f"expected {EXPECT_SUMMARY}",
            str(directory / SUMMARY_FILE),
        )
    return stamp


def _block_label(summary: dict[str, Any], field_name: str | None, directory: Path) -> str:
    if field_name is None:
        return ""
    value = summary.get(field_name)
    if value is None or value == "":
        raise UserError(
            f"the jobSummary has no field {field_name!r} for --block",
            str(directory / SUMMARY_FILE),
            "pass it with kube-burner --user-metadata, or leave --block out to pair in time order",
        )
    return str(value)
