"""A sweep's run: the options it is given, its rows in the store at the start (run, arms),
what a resumed run has done already, and the check that a resume runs the same plan."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from abtest.batch.run_record import new_run
from abtest.engine.schedule import RoundKey
from abtest.engine.sweep_nodes import NodeKit
from abtest.engine.sweep_plan import SweepPlan
from abtest.errors import UserError
from abtest.store.db import Store
from abtest.store.tables import ArmRow

Event = Callable[[str, dict[str, Any]], None]


@dataclass
class SweepOptions:
    fail_fast: bool = False
    accept_new_host_key: bool = False
    break_lock: bool = False
    command: str | None = None
    kind: str = "sweep"  # the run's kind: sweep, or regress for the regression gate


def done_keys(store: Store, run_id: str, node_name: str) -> set[RoundKey]:
    return store.rounds.done_keys(run_id, node_name)


def failed_arms(store: Store, run_id: str) -> dict[str, str]:
    return store.arms.failed(run_id)


def start_run(store: Store, plan: SweepPlan, opts: SweepOptions, kit: NodeKit) -> str:
    first = plan.profiles[0]
    env = {p.node_name: kit.environment(p) for p in plan.profiles}
    run_id = new_run(
        store,
        opts.kind,
        command=opts.command,
        profile=first,
        node_name=first.node_name,
        playbook=plan.playbook,
        env=env[first.node_name] | {"nodes": env},
        plan=plan.to_dict(),
    )
    store.runs.describe(
        run_id, catalog=plan.catalog.name, design=plan.design, seed=plan.schedule.seed
    )
    store.arms.add(
        run_id,
        (
            ArmRow(
                a.name,
                a.on,
                a.settings_dict()
                | a.pod_dict()
                | ({"kubelet.binary": a.kubelet_binary} if a.kubelet_binary else {}),
            )
            for a in plan.arms
        ),
    )
    return run_id


def resume_plan_check(store: Store, run_id: str, plan: SweepPlan) -> SweepPlan:
    """Refuse to resume a run under other conditions than it was started with: another
    kind of run, another schedule, or a playbook (workload, generator) edited since. Returns
    the plan to resume with: its rounds start as the run's first rounds did (a run from
    before the random start has none)."""
    row = store.run_row(run_id)
    if row["kind"] != "sweep":
        raise UserError(f"run {run_id} is a {row['kind']} run, not a sweep", "--resume")
    stored_plan = store.runs.plan(run_id)
    now_plan = json.loads(json.dumps(plan.to_dict(), default=str))
    # the schedule holds each arm's kubelet settings; arm_pods what it renders into its pods
    # (a RuntimeClass, annotations), which an edited catalog can change under the same name
    if any(stored_plan.get(k, {}) != now_plan.get(k, {}) for k in ("schedule", "arm_pods")):
        raise UserError(
            f"run {run_id} was planned differently (playbook, seed, rounds, sizes, or arms:"
            " their kubelet settings or pod parts)",
            "--resume",
            "resume with the same flags and playbook as the original run",
        )
    text = plan.playbook.text
    now = hashlib.sha256(text.encode()).hexdigest() if text else None
    if row["playbook_sha256"] and now and row["playbook_sha256"] != now:
        raise UserError(
            f"playbook {plan.playbook.source} changed since run {run_id} started",
            "--resume",
            "put the playbook back as it was, or start a new run",
        )
    return _same_start(stored_plan.get("generator"), plan)


def _same_start(stored: Any, plan: SweepPlan) -> SweepPlan:
    if not isinstance(stored, dict):
        return plan
    width = stored.get("start_dither_s", 0.0)
    gen = plan.playbook.generator
    if not isinstance(width, int | float) or width == gen.start_dither_s:
        return plan
    return replace(
        plan, playbook=replace(plan.playbook, generator=replace(gen, start_dither_s=width))
    )
