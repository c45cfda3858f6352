"""A node's history across runs: the rounds of one arm and size in every run, and what each run
stored about the node and the tool (for "what changed between these two runs")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from abtest.config.json_object import json_object

if TYPE_CHECKING:
    import pandas as pd

    from abtest.store.db import Store

#: the round columns a history can follow (times in seconds)
METRICS = ("batch_ready_s", "p50_s", "p95_s", "p99_s", "mean_s")


def _marks(nodes: Sequence[str]) -> str:
    return ", ".join("?" for _ in nodes)


def node_rounds(
    store: Store, nodes: Sequence[str], arm: str, size: int, metric: str
) -> pd.DataFrame:
    """Accepted, measured rounds of ``arm`` at ``size`` on ``nodes`` (one node, or a pool) in
    every run, in run order: run_id, created_at, node_name, value. Only committed rounds
    exist (a round is stored whole or not at all)."""
    if metric not in METRICS:
        raise ValueError(metric)
    return store.frame(
        f"SELECT r.run_id, u.created_at, r.node_name, r.{metric} AS value FROM rounds r "
        f"JOIN runs u ON u.id = r.run_id WHERE r.node_name IN ({_marks(nodes)}) AND r.arm = ? "
        f"AND r.size = ? AND r.accepted = 1 AND r.warmup = 0 AND r.{metric} IS NOT NULL "
        f"AND r.{metric} > 0 ORDER BY u.created_at, r.run_id, r.id",
        (*nodes, arm, size),
    )


def node_arms(store: Store, nodes: Sequence[str]) -> list[tuple[str, int]]:
    """(arm, size) pairs measured on the nodes, most rounds first."""
    rows = store.query(
        f"SELECT arm, size, COUNT(*) AS n FROM rounds WHERE node_name IN ({_marks(nodes)}) "
        "AND accepted = 1 AND warmup = 0 GROUP BY arm, size ORDER BY n DESC, arm, size",
        tuple(nodes),
    )
    return [(str(r[0]), int(r[1])) for r in rows]


def pool_facts(store: Store, run_id: str, nodes: Sequence[str], arm: str) -> dict[str, Any]:
    """A run's facts over a pool of nodes: one value where the nodes agree, else
    ``node=value`` for each node."""
    per_node = {n: run_facts(store, run_id, n, arm).facts for n in nodes}
    keys = dict.fromkeys(k for facts in per_node.values() for k in facts)
    out: dict[str, Any] = {}
    for key in keys:
        values = {n: facts.get(key) for n, facts in per_node.items()}
        distinct = {json.dumps(v, sort_keys=True, default=str) for v in values.values()}
        out[key] = (
            next(iter(values.values()))
            if len(distinct) == 1
            else ", ".join(f"{n}={v}" for n, v in values.items())
        )
    return out


def base_config(store: Store, run_id: str, node: str) -> bytes | None:
    """The node's kubelet config as the run found it (the journal keeps the original bytes
    of every change it made), or None when the run changed no config there.

    The run's first config change on the node, by its run id; a run stored before the journal
    had one (schema v4) is found by its time window, over rows that name no run."""
    rows = store.query(
        "SELECT original FROM node_journal WHERE node_name = ? AND kind = 'config' "
        "AND run_id = ? ORDER BY id LIMIT 1",
        (node, run_id),
    )
    if not rows:
        run = store.query("SELECT created_at, finished_at FROM runs WHERE id = ?", (run_id,))
        if not run:
            return None
        started, finished = run[0]
        # a running run has no end; the clause is left out (PostgreSQL cannot type a bare
        # NULL parameter in `? IS NULL`)
        until = "" if finished is None else " AND created_at <= ?"
        rows = store.query(
            "SELECT original FROM node_journal WHERE node_name = ? AND kind = 'config' "
            f"AND run_id IS NULL AND created_at >= ?{until} ORDER BY id LIMIT 1",
            (node, started) if finished is None else (node, started, finished),
        )
    return bytes(rows[0][0]) if rows and rows[0][0] is not None else None


@dataclass(frozen=True)
class RunFacts:
    """What a run stored that can differ from night to night."""

    run_id: str
    facts: dict[str, Any] = field(default_factory=dict)


def run_facts(store: Store, run_id: str, node: str, arm: str) -> RunFacts:
    row = store.run_row(run_id)
    env = _obj(row["env_json"])
    node_env = _obj(env.get("nodes", {})).get(node) if isinstance(env.get("nodes"), dict) else None
    node_env = _obj(node_env) if node_env else env
    facts_node = _obj(node_env.get("node"))
    git = _obj(node_env.get("git"))
    arms = store.query(
        "SELECT settings_json FROM arms WHERE run_id = ? AND name = ?", (run_id, arm)
    )
    settings = _obj(arms[0][0]) if arms else {}
    visits = store.query(
        "SELECT config_sha256, verified_json FROM visits WHERE run_id = ? AND node_name = ? "
        "AND arm = ? AND applied = 1 ORDER BY id",
        (run_id, node, arm),
    )
    hashes = sorted({str(v[0]) for v in visits if v[0]})
    gates: dict[str, Any] = {}
    for v in visits:
        for name, seen in _obj(v[1]).items():
            if name.startswith("featureGates.") or "Gate" in name:
                gates[name] = seen.get("configz") if isinstance(seen, dict) else seen
    gates |= {k: v for k, v in settings.items() if k.startswith("featureGates.")}
    facts: dict[str, Any] = {
        "kubelet_version": facts_node.get("kubelet_version"),
        "container_runtime": facts_node.get("container_runtime"),
        "kernel": facts_node.get("kernel"),
        "config_sha256": ", ".join(hashes) or None,
        "gates": gates or None,
        "runtime_handler": settings.get("pod.runtimeClassName") or "default",
        "kubelet_binary": settings.get("kubelet.binary"),
        "controller_version": node_env.get("tool_version"),
        "controller_commit": (git.get("commit") or "")[:12] or None,
        "playbook_sha256": (row["playbook_sha256"] or "")[:12] or None,
    }
    return RunFacts(run_id, facts)


def _obj(value: Any) -> dict[str, Any]:
    return json_object(value) or {}
