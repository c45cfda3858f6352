"""Pooled runs: runs of the same playbook, catalog and arms, made by different controllers on
disjoint nodes, read as one fleet run (node as a block factor, node x arm interaction: the
fleet analysis of ``abtest.analysis.fleet`` / ``abtest.stats.fleet``, unchanged).

Pooling is only sound when the runs measured the same thing the same way, so everything that
defines the measurement must agree, and the first difference is refused by name: the
playbook's method (every playbook key but the seed, the block count, the profile and the
description, which may differ between controllers), the catalog, the design, the arms and
their settings, the sizes. The nodes must be disjoint (a node in two runs would be two blocks
of one node's factor with different block orders), and no run may have stopped when resolved
(its intervals are read at a corrected level that pooling would not keep).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import yaml

from abtest.analysis.run_data import RunData, _block_labels
from abtest.config.json_object import json_object
from abtest.errors import UserError
from abtest.stats.sequential import sequential_plan_of

#: playbook keys that may differ between pooled runs (they do not change what a round measures)
FREE_KEYS = frozenset({"seed", "rounds", "profile", "description"})


#: what the stored plan adds to the playbook: the command line's overrides (--qps, --warmup...)
PLAN_KEYS = ("generator", "factors", "arm_pods")


def _method(data: RunData) -> dict[str, Any]:
    text = data.run.get("playbook_text")
    try:
        parsed = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        parsed = None
    out: dict[str, Any] = (
        {k: v for k, v in parsed.items() if k not in FREE_KEYS}
        if isinstance(parsed, dict)
        else {"playbook_sha256": data.run.get("playbook_sha256")}
    )
    plan = data.stored_plan()
    for key in PLAN_KEYS:
        if key in plan:
            out[f"plan.{key}"] = plan[key]
    if "warmup" in (json_object(plan.get("options")) or {}):
        out["plan.warmup"] = plan["options"]["warmup"]
    return out


def _arms(data: RunData) -> dict[str, tuple[tuple[str, str], ...]]:
    return {a.name: a.settings for a in data.arms}


def _nodes(data: RunData) -> set[str]:
    return {str(n) for n in data.rounds["node_name"]}


def _refuse(first: RunData, other: RunData, what: str, a: object, b: object) -> UserError:
    return UserError(
        f"runs {first.run['id']} and {other.run['id']} differ in {what}: {a} vs {b}",
        "abtest report RUN1 RUN2 ...",
        "pool only runs of the same playbook method, catalog, design, arms and sizes",
    )


def check_poolable(runs: Sequence[RunData]) -> None:
    first = runs[0]
    seen: dict[str, str] = {n: str(first.run["id"]) for n in _nodes(first)}
    for other in runs:
        if sequential_plan_of(other.run.get("plan_json"), 0.95) is not None:
            raise UserError(
                f"run {other.run['id']} stopped when resolved: its intervals are at a level "
                "corrected for its looks, which pooling cannot keep",
                "abtest report RUN1 RUN2 ...",
                "report it on its own",
            )
    for other in runs[1:]:
        for what, get in (
            ("catalog", lambda d: d.run.get("catalog_name")),
            ("design", lambda d: d.run.get("design")),
            ("arms", lambda d: sorted(_arms(d))),
            ("sizes", lambda d: d.sizes()),
        ):
            if get(first) != get(other):
                raise _refuse(first, other, what, get(first), get(other))
        arms_a, arms_b = _arms(first), _arms(other)
        for name, settings in arms_a.items():
            if arms_b[name] != settings:
                raise _refuse(first, other, f"arm {name}'s settings", settings, arms_b[name])
        method_a, method_b = _method(first), _method(other)
        for key in sorted(set(method_a) | set(method_b)):
            if method_a.get(key) != method_b.get(key):
                raise _refuse(first, other, f"playbook {key}", method_a.get(key), method_b.get(key))
        for node in sorted(_nodes(other)):
            if node in seen:
                raise UserError(
                    f"node {node} is in runs {seen[node]} and {other.run['id']}: pooled runs "
                    "must be on disjoint nodes",
                    "abtest report RUN1 RUN2 ...",
                    "pool runs of different nodes (one node's runs: compare them with "
                    "`abtest regress --reference-run --candidate-run`, or `abtest history`)",
                )
            seen[node] = str(other.run["id"])


def check_pool_ids(run_ids: Sequence[str]) -> None:
    """Two or more different runs, before any is read."""
    if len(set(run_ids)) != len(run_ids) or len(run_ids) < 2:
        raise UserError("pooling needs two or more different runs", "abtest report RUN1 RUN2")


def pool_runs(runs: Sequence[RunData]) -> RunData:
    """The runs as one fleet run; UserError naming the first difference that forbids it."""
    run_ids = [str(r.run["id"]) for r in runs]
    check_pool_ids(run_ids)
    check_poolable(runs)
    first = runs[0]

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        kept = [f for f in frames if not f.empty]
        return pd.concat(kept, ignore_index=True) if kept else frames[0]

    rounds = cat([r.rounds for r in runs])
    rounds["block_label"] = _block_labels(rounds)  # node/block: blocks pair within a node
    nodes_env: dict[str, Any] = {}
    for r in runs:
        nodes_env |= r.env.get("nodes") or {n: r.env for n in _nodes(r)}
    pooled_id = "+".join(run_ids)
    return RunData(
        run=first.run
        | {
            "id": pooled_id,
            "kind": "pooled",
            "status": ", ".join(f"{r.run['id']}: {r.run['status']}" for r in runs),
            "seed": ", ".join(str(r.run.get("seed")) for r in runs),
            "command": "; ".join(str(r.run.get("command")) for r in runs),
        },
        env=first.env | {"nodes": nodes_env},
        arms=first.arms,
        factors=first.factors,
        rounds=rounds,
        pods=cat([r.pods for r in runs]),
        visits=cat([r.visits for r in runs]),
        deltas=cat([r.deltas for r in runs]),
        events=cat([r.events for r in runs]),
    )
