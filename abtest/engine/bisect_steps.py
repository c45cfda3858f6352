"""The measurements of `abtest bisect`: each is an ordinary sweep of kubelet-build arms (the
endpoint confirmation: ``good`` and ``bad``; a step: ``low``, ``mid`` and ``high``) in
randomized blocks, looking at planned block counts and adding blocks while undecided, as the
regression gate does (:mod:`abtest.engine.regress_live`). The sweep engine swaps the builds in
(journaled) and puts the node's own kubelet back on every exit path; a run stopped mid-way is
resumed by measuring it again under its id (the rounds it has are skipped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pandas as pd

from abtest.analysis.bisect import KIND
from abtest.config.build_names import BuildName
from abtest.config.domain import Arm, Catalog
from abtest.config.plan_options import PlanOptions
from abtest.config.playbook import NodeProfile, Playbook
from abtest.engine.fleet import same_node
from abtest.engine.regress_live import CouldNotMeasure, raise_if_arms_failed, round_outcome
from abtest.engine.regress_rounds import analysable_rounds, decide, look_schedule
from abtest.engine.schedule import build_schedule
from abtest.engine.sweep import SweepOptions, run_sweep
from abtest.engine.sweep_nodes import NodeKit
from abtest.engine.sweep_plan import SweepPlan, check_plan_size, check_pod_renders
from abtest.stats import overall_verdict
from abtest.stats.bisect import MORE, StepLook, cells_of, step_look
from abtest.stats.regress_decision import Decision
from abtest.store.db import Store

T = TypeVar("T")


@dataclass(frozen=True)
class BisectSetup:
    """What every measurement of one bisection shares."""

    playbook: Playbook
    nodes: tuple[NodeProfile, ...]
    profile_names: tuple[str, ...]
    size: int
    metric: str  # a rounds column: batch_ready_s or p95_s
    margin_pct: float
    confidence: float
    first_look: int
    max_blocks: int
    seed: int
    accept_new_host_key: bool = False

    @property
    def looks(self) -> list[int]:
        return look_schedule(self.first_look, self.max_blocks)


@dataclass(frozen=True)
class Measured:
    """A measurement's decision, the run that holds its rounds, the blocks it took."""

    run_id: str
    blocks: int
    looks: int
    wall_s: float


def measure_plan(setup: BisectSetup, arms: Sequence[tuple[str, BuildName]], seed: int) -> SweepPlan:
    """A sweep of the builds as arms (name, build), one size, up to the cap of blocks."""
    same_node(setup.nodes)
    pb = setup.playbook
    built = tuple(Arm(name, frozenset(), (), build) for name, build in arms)
    check_plan_size(len(built), 1, setup.max_blocks, pb.source)
    check_pod_renders(pb, setup.nodes)
    schedule = build_schedule(built, (setup.size,), setup.max_blocks, seed, pb.warmup)
    catalog = Catalog(KIND, KIND, "kubelet builds of a bisection", ())
    options = PlanOptions(
        playbook=pb.source,
        profiles=setup.profile_names,
        rounds=setup.max_blocks,
        sizes=(setup.size,),
        seed=seed,
    )
    return SweepPlan(pb, catalog, (), KIND, built, schedule, setup.nodes, options)


def measure(
    plan: SweepPlan,
    setup: BisectSetup,
    store: Store,
    decide_at: Callable[[pd.DataFrame, int, int], T | None],
    *,
    say: Callable[[str], None],
    started: Callable[[str], None],
    run_id: str | None = None,
    kit: NodeKit | None = None,
    spent: float = 0.0,
    looked: Callable[[str, float], None] | None = None,
) -> tuple[T, Measured]:
    """Measure look by look until ``decide_at(rounds, look, max_looks)`` decides (it must at
    the last look). ``started(run_id)`` is called as soon as the run exists, to tag it;
    ``looked(run_id, seconds)`` after each look with the node time so far (``spent``: what a
    resumed run had spent before)."""
    looks = setup.looks
    opts = SweepOptions(kind=KIND, accept_new_host_key=setup.accept_new_host_key)
    wall = spent

    def emit(kind: str, data: dict[str, Any]) -> None:
        if kind == "run" and not data.get("resumed"):
            started(str(data["run_id"]))
        elif kind == "placement":
            say(f"  {data['msg']}")
        elif kind == "round_done":
            s, r = data["slot"], data["result"]
            say(f"  block {s.block + 1} {s.arm} ({_build_of(plan, s.arm)}): {round_outcome(r)}")

    for number, blocks in enumerate(looks, start=1):
        result = run_sweep(
            plan, store, opts, emit, resume_run_id=run_id, upto_block=blocks, kit=kit
        )
        run_id, wall = result.run_id, wall + result.wall_s
        if looked is not None:
            looked(run_id, wall)
        raise_if_arms_failed(result, lambda _node, arm: f"{arm} ({_build_of(plan, arm)})")
        rounds = analysable_rounds(store, run_id)
        if _short(rounds, plan.arms, setup.size):
            if number == len(looks):
                raise CouldNotMeasure(
                    f"run {run_id}: too few accepted rounds; see `abtest report {run_id}`"
                )
            continue
        found = decide_at(rounds, number, len(looks))
        if found is not None:
            return found, Measured(run_id, blocks, number, wall)
    raise CouldNotMeasure(f"run {run_id}: no decision at the last look")


def confirm_at(setup: BisectSetup) -> Callable[[pd.DataFrame, int, int], Decision | None]:
    """The regression gate's decision, bad (candidate) against good (reference)."""

    def at(rounds: pd.DataFrame, look: int, max_looks: int) -> Decision | None:
        decisions = decide(
            rounds,
            reference="good",
            candidate="bad",
            sizes=[setup.size],
            metrics=[setup.metric],
            margin_pct=setup.margin_pct,
            confidence=setup.confidence,
            look=look,
            max_looks=max_looks,
        )
        if overall_verdict(decisions) == "INCONCLUSIVE" and look < max_looks:
            return None
        return decisions[0]

    return at


def step_at(setup: BisectSetup) -> Callable[[pd.DataFrame, int, int], StepLook | None]:
    """The step's outcome: which half of (low, high) mid's side of the slowdown is in."""

    def at(rounds: pd.DataFrame, look: int, max_looks: int) -> StepLook | None:
        cells = cells_of(rounds, ("low", "mid", "high"), setup.size, setup.metric)
        if cells.shape[0] < 2:  # fewer than two complete blocks: no interval yet
            if look < max_looks:
                return None
            raise CouldNotMeasure("fewer than two complete blocks at the cap: rounds rejected")
        found = step_look(cells, look=look, max_looks=max_looks, confidence=setup.confidence)
        return None if int(found.outcome) == MORE else found

    return at


def _short(rounds: pd.DataFrame, arms: Sequence[Arm], size: int) -> bool:
    """Some arm has fewer than 2 accepted rounds at the size: no decision at this look."""
    at_size = rounds[rounds["size"] == size]
    return any(int((at_size["arm"] == a.name).sum()) < 2 for a in arms)


def _build_of(plan: SweepPlan, arm: str) -> str:
    for a in plan.arms:
        if a.name == arm:
            return a.kubelet_binary or "node's own"
    return arm
