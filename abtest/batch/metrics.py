"""Kubelet /metrics (Prometheus text format) -> histogram sums/counts and counters (pure).

A round keeps the per-round deltas (after - before) of the pod-start and runtime-stage
histograms, so a report can say which stage moved. Buckets are not kept: sum and count give
the mean per stage, which is what a comparison between arms needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from abtest.batch.round_records import MetricDelta

# Histograms (sum + count) whose deltas a round keeps.
HISTOGRAMS: tuple[str, ...] = (
    "kubelet_pod_start_sli_duration_seconds",
    "kubelet_pod_start_total_duration_seconds",
    "kubelet_pod_start_duration_seconds",
    "kubelet_pod_worker_start_duration_seconds",
    "kubelet_pod_worker_duration_seconds",
    "kubelet_pleg_relist_duration_seconds",
    "kubelet_pleg_relist_interval_seconds",
    "kubelet_run_podsandbox_duration_seconds",
    "kubelet_runtime_operations_duration_seconds",
    "kubelet_cgroup_manager_duration_seconds",
    # observed from the pod's first status at every write (v1.36 status_manager.go: ``at`` is
    # carried forward to every later version), so it reads roughly the pod's age at each write
    "kubelet_pod_status_sync_duration_seconds",
    # the agc series' own: each status version's creation -> its PATCH (a write's real delay)
    "kubelet_pod_status_write_delay_seconds",
    "kubelet_image_pull_duration_seconds",
    # client-go's: each of the kubelet's API requests, by verb (and host), from its send to
    # its response: the round trip the kubelet sees (issue 45; `lab up --api-latency` adds to
    # it on the lab), beside the status writes and reads it serializes
    "rest_client_request_duration_seconds",
)
# Counters whose deltas a round keeps (delta_count only).
COUNTERS: tuple[str, ...] = (
    "kubelet_started_pods_total",
    "kubelet_started_pods_errors_total",
    "kubelet_started_containers_total",
    "kubelet_started_containers_errors_total",
    "kubelet_run_podsandbox_errors_total",
    "kubelet_runtime_operations_total",
    "kubelet_runtime_operations_errors_total",
    "kubelet_restarted_pods_total",
    "kubelet_pleg_discard_events",
    # the kubelet's own API requests by method and code (client-go): what a setting takes off
    # the API server, e.g. the event writes a lower eventRecordQPS holds back
    "rest_client_requests_total",
    # the agc patch series' own counters (kubelet-patches/agc): whether each gate's mechanism
    # engaged in a round (absent from an upstream kubelet, so no delta there)
    "kubelet_pod_status_sync_retries_total",
    "kubelet_qos_cgroup_update_requests_total",
    "kubelet_qos_cgroup_updates_total",
    "kubelet_cgroup_manager_systemd_units_created_with_resources_total",
    "kubelet_cgroup_manager_libcontainer_managers_built_total",
)

Key = tuple[str, str]  # (metric, canonical labels)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


class MetricsParseError(ValueError):
    pass


def parse_labels(text: str) -> dict[str, str]:
    """``{a="x",b="y \\" z"}`` -> {"a": "x", "b": 'y \\" z'} (values kept escaped)."""
    inner = text.strip()
    if inner.startswith("{"):
        inner = inner[1:]
    if inner.endswith("}"):
        inner = inner[:-1]
    out: dict[str, str] = {}
    pos = 0
    inner = inner.strip()
    while pos < len(inner):
        m = LABEL.match(inner, pos)
        if not m:
            raise MetricsParseError(f"malformed labels: {text!r}")
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def canonical(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))


def _value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    return float(text)


def parse(
    text: str,
    histograms: Iterable[str] = HISTOGRAMS,
    counters: Iterable[str] = COUNTERS,
) -> dict[Key, tuple[float | None, float]]:
    """``(metric, labels) -> (sum, count)`` for the named histograms; ``(None, value)`` for
    the named counters. Other families, buckets, comments and blank lines are skipped."""
    hist = set(histograms)
    ctrs = set(counters)
    sums: dict[Key, float] = {}
    counts: dict[Key, float] = {}
    values: dict[Key, float] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise MetricsParseError(f"line {lineno}: cannot parse {line[:120]!r}")
        name, label_text, value_text = m.group(1), m.group(2) or "", m.group(3)
        if name.endswith("_sum") and name[:-4] in hist:
            sums[(name[:-4], canonical(parse_labels(label_text)))] = _value(value_text)
        elif name.endswith("_count") and name[:-6] in hist:
            counts[(name[:-6], canonical(parse_labels(label_text)))] = _value(value_text)
        elif name in ctrs:
            values[(name, canonical(parse_labels(label_text)))] = _value(value_text)
    out: dict[Key, tuple[float | None, float]] = {}
    for key, count in counts.items():
        out[key] = (sums.get(key, math.nan), count)
    for key, value in values.items():
        out[key] = (None, value)
    return out


def deltas(
    before: Mapping[Key, tuple[float | None, float]],
    after: Mapping[Key, tuple[float | None, float]],
    *,
    keep_zero: bool = False,
) -> list[MetricDelta]:
    """after - before per series (a series new in ``after`` counts from zero). A series whose
    count went down (the kubelet restarted in between) is reported from zero, like Prometheus'
    counter-reset handling."""
    out: list[MetricDelta] = []
    for key in sorted(after):
        s_after, c_after = after[key]
        s_before, c_before = before.get(key, (0.0 if s_after is not None else None, 0.0))
        if c_after < c_before:  # reset
            s_before, c_before = (0.0 if s_after is not None else None), 0.0
        d_count = c_after - c_before
        if d_count == 0 and not keep_zero:
            continue
        d_sum = None
        if s_after is not None:
            d_sum = s_after - (s_before or 0.0)
        out.append(MetricDelta(key[0], key[1], d_sum, d_count))
    return out
