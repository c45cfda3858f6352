"""The descriptive tables of a run: acceptance counts, rounds left out, kubelet stage deltas,
events per pod, the kubelet's API requests per pod, restart-to-healthy medians, the
environment. Counting, sums and medians only;
no intervals.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

import pandas as pd

from abtest.analysis.run_data import INCLUDED, RunData

#: the environment block's first rows, from the runs row: (name, the column it shows)
RUN_ROWS = (
    ("run", "id"),
    ("kind", "kind"),
    ("status", "status"),
    ("stop reason", "stop_reason"),
    ("created", "created_at"),
    ("finished", "finished_at"),
    ("playbook", "playbook_name"),
    ("playbook sha256", "playbook_sha256"),
    ("catalog", "catalog_name"),
    ("design", "design"),
    ("seed", "seed"),
    ("profile", "profile_name"),
)

# The environment block's rows after those: a name, then where to find the value in env_json,
# flat (the sweep's documented keys) or nested (what the batch engine's probe records).
ENV_ROWS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("node", (("node",), ("node", "node_name"))),
    ("kernel", (("kernel",), ("node", "kernel"))),
    ("os", (("os",), ("node", "os_image"))),
    ("cgroup", (("cgroup",), ("node", "cgroup"))),
    ("kubelet_version", (("kubelet_version",), ("node", "kubelet_version"))),
    ("containerd_version", (("containerd_version",), ("node", "container_runtime"))),
    ("apiserver_version", (("apiserver_version",), ("api_server", "git_version"))),
    ("node_cpu", (("node_cpu",), ("node", "capacity", "cpu"))),
    ("node_memory", (("node_memory",), ("node", "capacity", "memory"))),
    ("tool_version", (("tool_version",),)),
    ("git_revision", (("git_revision",), ("git", "commit"))),
)
# Bulky or repeated parts of env_json left out of the block (they stay in report.json).
ENV_SKIP = frozenset({"nodes", "node.labels", "node.allocatable", "node.capacity"})


@dataclass(frozen=True)
class AcceptanceRow:
    """Rounds of one arm at one size, counted; event counts summed over every round."""

    arm: str
    size: int
    rounds: int
    warmup: int
    accepted: int  # non-warm-up rounds that passed acceptance (the analysed ones)
    failed: int  # non-warm-up rounds that failed acceptance
    restarts: int
    ready_regressions: int
    sandbox_failures: int
    cleanup_median_s: float | None
    reasons: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ExcludedRound:
    round_id: int
    block: int | None
    arm: str
    size: int
    why: str  # "warm-up" or the acceptance failure reason


@dataclass(frozen=True)
class StageDelta:
    """Median over an arm's analysed rounds of one kubelet histogram's mean per observation."""

    metric: str
    labels: str
    arm: str
    n_rounds: int
    median_s: float


# the kubelet's client-go request counter (labels: code, host, method)
API_REQUESTS_METRIC = "rest_client_requests_total"
# a stored label set, as the batch engine writes it: name="value",... (values escaped)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def stored_labels(text: object) -> dict[str, str]:
    """A stored label set (``name="value",...``) as a dict; {} for none."""
    return dict(_LABEL.findall(str(text or "")))


@dataclass(frozen=True)
class ApiRequestRate:
    """The kubelet's API requests of one method and status code, per pod of one arm at one
    size: the round's counter delta (metrics scraped before the round and after its
    observation window, before cleanup) divided by its pods, the median over the arm's
    analysed rounds (0 where a round made none)."""

    method: str
    code: str
    arm: str
    size: int
    n_rounds: int
    per_pod_median: float


@dataclass(frozen=True)
class EventRate:
    """One event reason of one arm at one size: events per pod (summed over the round's
    pods, repeats counted), the median over the arm's analysed rounds (0 where a round had
    none). ``type`` is Normal or Warning; '' for events stored before types were recorded."""

    reason: str
    type: str
    arm: str
    size: int
    n_rounds: int
    per_pod_median: float


# The agc patch series' own counters (kubelet-patches/agc): whether each gate's mechanism
# engaged in a round and how much it did. An upstream kubelet has none of them, so its rounds
# give no row (not a row of zeros).
MECHANISM_METRICS = (
    "kubelet_pod_status_sync_retries_total",
    "kubelet_qos_cgroup_update_requests_total",
    "kubelet_qos_cgroup_updates_total",
    "kubelet_cgroup_manager_systemd_units_created_with_resources_total",
    "kubelet_cgroup_manager_libcontainer_managers_built_total",
)


@dataclass(frozen=True)
class MechanismRate:
    """One mechanism counter (metric and label set) of one arm at one size, per pod: the
    round's counter delta divided by its pods, the median over the arm's analysed rounds that
    have the counter at all (0 where such a round did not move it)."""

    metric: str
    labels: str
    arm: str
    size: int
    n_rounds: int
    per_pod_median: float


# A warning the kubelet writes at least this often per pod, in the median round, is a property
# of the node's setup (it repeats for every pod), not of one unlucky pod.
REPEATED_WARNING_PER_POD = 1.0


@dataclass(frozen=True)
class RestartRow:
    """An arm's node visits: kubelet restarts and how long until healthy (medians)."""

    arm: str
    visits: int
    applied: int
    verified: int
    errors: int
    healthz_median_s: float | None
    ready_median_s: float | None
    verified_median_s: float | None


def acceptance(data: RunData) -> tuple[AcceptanceRow, ...]:
    rounds = data.rounds
    out: list[AcceptanceRow] = []
    for arm in data.arms:
        for size in data.sizes():
            rows = rounds[(rounds["arm"] == arm.name) & (rounds["size"] == size)]
            if rows.empty:
                continue
            measured = rows[rows["warmup"] == 0]
            failed = measured[measured["accepted"] == 0]
            reasons = Counter(_reason(r) for r in failed["reason"])
            cleanup = rows["cleanup_s"].dropna()
            out.append(
                AcceptanceRow(
                    arm=arm.name,
                    size=size,
                    rounds=len(rows),
                    warmup=int((rows["warmup"] != 0).sum()),
                    accepted=int((measured["accepted"] == 1).sum()),
                    failed=len(failed),
                    restarts=int(rows["restarts"].sum()),
                    ready_regressions=int(rows["ready_regressions"].sum()),
                    sandbox_failures=int(rows["sandbox_failures"].sum()),
                    cleanup_median_s=float(cleanup.median()) if len(cleanup) else None,
                    reasons=tuple(sorted(reasons.items())),
                )
            )
    return tuple(out)


def excluded(data: RunData) -> tuple[ExcludedRound, ...]:
    rows = data.rounds[~data.rounds[INCLUDED]]
    return tuple(
        ExcludedRound(
            round_id=int(r["id"]),
            block=None if pd.isna(r["block"]) else int(r["block"]),
            arm=str(r["arm"]),
            size=int(r["size"]),
            why="warm-up" if r["warmup"] else _reason(r["reason"]),
        )
        for r in rows.to_dict(orient="records")
    )


def _reason(reason: object) -> str:
    return reason if isinstance(reason, str) and reason else "not accepted"


def stages(data: RunData) -> tuple[StageDelta, ...]:
    deltas = data.deltas[data.deltas[INCLUDED] & data.deltas["per_obs_s"].notna()]
    if deltas.empty:
        return ()
    order = {a.name: i for i, a in enumerate(data.arms)}
    grouped = deltas.groupby(["metric", "labels", "arm"], sort=True)["per_obs_s"]
    rows = [
        StageDelta(str(metric), str(labels), str(arm), int(values.size), float(values.median()))
        for (metric, labels, arm), values in grouped
    ]
    rows.sort(key=lambda r: (r.metric, r.labels, order.get(r.arm, len(order))))
    return tuple(rows)


def _per_pod_medians(
    rounds: pd.DataFrame, counts: pd.DataFrame, keys: list[str], value: str
) -> list[tuple[str, str, str, int, int, float]]:
    """Per (arm, size) of ``rounds`` and per two-part key of ``counts`` (columns round_id,
    *keys, value): the per-round sum divided by the round's pods, the median over the arm's
    rounds, a round without the key counted as 0. ``(key1, key2, arm, size, n_rounds,
    median)``."""
    per_round = counts.pivot_table(index="round_id", columns=keys, values=value, aggfunc="sum")
    per_round = per_round.reindex(rounds["id"].to_numpy()).fillna(0.0)
    size = rounds.set_index("id")["size"].astype(float)
    per_pod = per_round.div(size.reindex(per_round.index), axis=0)
    out: list[tuple[str, str, str, int, int, float]] = []
    for (arm, n_pods), ids in rounds.groupby(["arm", "size"])["id"]:
        cells = per_pod.loc[ids.to_numpy()]
        for column in cells.columns:
            first, second = cast(tuple[str, str], column)  # the pivot's two-part key
            out.append(
                (
                    str(first),
                    str(second),
                    str(arm),
                    int(cast(int, n_pods)),
                    len(cells),
                    float(cells[column].median()),
                )
            )
    return out


def event_rates(data: RunData) -> tuple[EventRate, ...]:
    events = data.events
    if events.empty:
        return ()
    events = events[events[INCLUDED]]
    rounds = data.rounds[data.rounds[INCLUDED]]
    if events.empty or rounds.empty:
        return ()
    kinds = events.assign(type=events["type"].fillna("").astype(str))
    # every analysed round, also those with no event of a reason: they count as 0
    out = [EventRate(*row) for row in _per_pod_medians(rounds, kinds, ["reason", "type"], "events")]
    order = {a.name: i for i, a in enumerate(data.arms)}
    out.sort(key=lambda r: (r.type != "Warning", r.reason, r.size, order.get(r.arm, len(order))))
    return tuple(out)


def api_request_rates(data: RunData) -> tuple[ApiRequestRate, ...]:
    deltas = data.deltas
    if deltas.empty:
        return ()
    rows = deltas[deltas[INCLUDED] & (deltas["metric"] == API_REQUESTS_METRIC)]
    rounds = data.rounds[data.rounds[INCLUDED]]
    if rows.empty or rounds.empty:
        return ()
    labels = [stored_labels(text) for text in rows["labels"]]
    keyed = pd.DataFrame(
        {
            "round_id": rows["round_id"].to_numpy(),
            "method": [lab.get("method", "") for lab in labels],
            "code": [lab.get("code", "") for lab in labels],
            "requests": pd.to_numeric(rows["delta_count"], errors="coerce").to_numpy(),
        }
    )
    # only rounds whose scrape worked count; the host label is summed over
    scraped = rounds[rounds["id"].isin(keyed["round_id"])]
    medians = _per_pod_medians(scraped, keyed, ["method", "code"], "requests")
    out = [ApiRequestRate(*row) for row in medians]
    order = {a.name: i for i, a in enumerate(data.arms)}
    out.sort(key=lambda r: (r.method, r.code, r.size, order.get(r.arm, len(order))))
    return tuple(out)


def mechanism_rates(data: RunData) -> tuple[MechanismRate, ...]:
    deltas = data.deltas
    if deltas.empty:
        return ()
    rows = deltas[deltas[INCLUDED] & deltas["metric"].isin(MECHANISM_METRICS)]
    rounds = data.rounds[data.rounds[INCLUDED]]
    if rows.empty or rounds.empty:
        return ()
    keyed = pd.DataFrame(
        {
            "round_id": rows["round_id"].to_numpy(),
            "metric": rows["metric"].astype(str).to_numpy(),
            "labels": rows["labels"].fillna("").astype(str).to_numpy(),
            "count": pd.to_numeric(rows["delta_count"], errors="coerce").to_numpy(),
        }
    )
    # only rounds on a build that has the counters: an upstream arm gets no row
    having = rounds[rounds["id"].isin(keyed["round_id"])]
    out = [
        MechanismRate(*row)
        for row in _per_pod_medians(having, keyed, ["metric", "labels"], "count")
    ]
    order = {a.name: i for i, a in enumerate(data.arms)}
    out.sort(key=lambda r: (r.metric, r.labels, r.size, order.get(r.arm, len(order))))
    return tuple(out)


def repeated_warnings(rates: tuple[EventRate, ...]) -> tuple[str, ...]:
    """A note per warning reason the kubelet wrote about every pod (median round): such a
    warning costs API writes in every round and usually comes from the node's setup, so a
    setting that silences it can look like a speed-up of the pods themselves."""
    worst: dict[str, EventRate] = {}
    for r in rates:
        if r.type != "Warning" or r.per_pod_median < REPEATED_WARNING_PER_POD:
            continue
        if r.reason not in worst or r.per_pod_median > worst[r.reason].per_pod_median:
            worst[r.reason] = r
    return tuple(
        f"every pod got {r.per_pod_median:.3g} {reason} warning events in the median round "
        f"({r.arm}, {r.size} pods): a warning repeated for every pod costs API writes in every "
        "round and usually comes from the node's setup (for MissingClusterDNS: no clusterDNS "
        "in the kubelet config); fix it on the node before reading small differences, since "
        "an arm that silences it gains from that alone"
        for reason, r in sorted(worst.items())
    )


def restarts(data: RunData) -> tuple[RestartRow, ...]:
    visits = data.visits
    out: list[RestartRow] = []
    for arm in data.arms:
        rows = visits[visits["arm"] == arm.name]
        if rows.empty:
            continue

        def median(column: str, rows: pd.DataFrame = rows) -> float | None:
            values = rows[column].dropna()
            return float(values.median()) if len(values) else None

        verified = rows["verified_json"].map(lambda v: isinstance(v, str) and bool(v.strip()))
        out.append(
            RestartRow(
                arm=arm.name,
                visits=len(rows),
                applied=int((rows["applied"] != 0).sum()),
                verified=int(verified.sum()),
                errors=int(rows["error"].map(lambda e: isinstance(e, str) and bool(e)).sum()),
                healthz_median_s=median("restart_to_healthz_s"),
                ready_median_s=median("restart_to_ready_s"),
                verified_median_s=median("restart_to_verified_s"),
            )
        )
    return tuple(out)


def environment(data: RunData) -> tuple[tuple[str, str], ...]:
    run = data.run
    pairs: list[tuple[str, object]] = [(name, run.get(column)) for name, column in RUN_ROWS]
    nodes = sorted({str(n) for n in data.rounds["node_name"]}) or [str(run.get("node_name"))]
    flat = _flatten(data.env)
    used: set[str] = set()
    for name, paths in ENV_ROWS:
        for path in paths:
            key = ".".join(path)
            if isinstance(flat.get(key), str | int | float) and flat[key] != "":
                pairs.append((name, flat[key]))
                used.add(key)
                break
    if "git.dirty" in flat and "git.commit" in used:
        used.add("git.dirty")
        if flat["git.dirty"]:
            pairs.append(("git_revision dirty", "yes"))
    if len(nodes) > 1 or not any(name == "node" for name, _ in pairs):
        pairs.append(("nodes", ", ".join(nodes)))
    pairs.extend(
        (key, value)
        for key, value in sorted(flat.items())
        if key not in used and not any(key == s or key.startswith(s + ".") for s in ENV_SKIP)
    )
    return tuple(
        (key, value if isinstance(value, str) else _json_text(value))
        for key, value in pairs
        if value is not None and value != ""
    )


def _flatten(env: dict[str, Any], prefix: str = "") -> dict[str, object]:
    """Nested objects as dotted keys: {"node": {"kernel": k}} -> {"node.kernel": k}."""
    flat: dict[str, object] = {}
    for key, value in env.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _json_text(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)
