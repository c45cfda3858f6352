"""Pure parts of the sweep engine: what resume reads back from the store (finished rounds,
failed arms), the refusal to resume a run with another plan, and the closing summary."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pandas as pd
import pytest

from abtest.batch.run_record import new_run
from abtest.cli.sweep_progress import summary_rows
from abtest.config.plan_options import PlanOptions
from abtest.engine.node_sweep import NodeSweep
from abtest.engine.schedule import RoundKey, remaining
from abtest.engine.sweep import SweepOptions, run_sweep
from abtest.engine.sweep_plan import SweepPlan, build_plan
from abtest.engine.sweep_run import done_keys, failed_arms, resume_plan_check
from abtest.errors import ApplyFailed, UserError
from abtest.store.db import Store
from abtest.testing import FakeKit, FakeNode, fake_profiles

NODE = "abtest-lab"


def _plan(**kw: Any) -> SweepPlan:
    base: dict[str, Any] = {"playbook": "lab-sweep", "rounds": 2, "sizes": (10, 20), "seed": 7}
    return build_plan(PlanOptions(**(base | kw)))


def _sweep_run(store: Store, plan: SweepPlan, kind: str = "sweep") -> str:
    return new_run(store, kind, command="test", node_name=NODE, plan=plan.to_dict())


def _round(store: Store, run_id: str, node: str, key: tuple[int, str, int, bool]) -> int:
    block, arm, size, warmup = key
    return store.insert(
        "rounds",
        {
            "run_id": run_id,
            "node_name": node,
            "block": block,
            "arm": arm,
            "size": size,
            "ordinal": 0,
            "warmup": warmup,
            "started_wall": 1.0,
            "accepted": 1,
            "pods_ready": size,
            "batch_ready_s": 1.0,
        },
    )


# --------------------------------------------------------------------------- done_keys


def test_done_keys_are_this_runs_and_this_nodes_rounds(store: Store) -> None:
    plan = _plan()
    run_a, run_b = _sweep_run(store, plan), _sweep_run(store, plan)
    mine = [(0, "baseline", 10, False), (0, "baseline", 10, True), (1, "combined", 20, False)]
    for key in mine:
        _round(store, run_a, NODE, key)
    _round(store, run_a, NODE, mine[0])  # a repeated key is still one finished key
    _round(store, run_a, "other-node", (1, "+kubeAPIQPS", 10, False))
    _round(store, run_b, NODE, (0, "+kubeAPIQPS", 20, False))

    done = done_keys(store, run_a, NODE)
    assert done == set(mine)
    for block, arm, size, warmup in done:  # the exact RoundKey types the schedule compares
        assert type(block) is int and type(arm) is str
        assert type(size) is int and type(warmup) is bool
    assert done_keys(store, run_a, "other-node") == {(1, "+kubeAPIQPS", 10, False)}
    assert done_keys(store, run_b, NODE) == {(0, "+kubeAPIQPS", 20, False)}
    assert done_keys(store, "no-such-run", NODE) == set()


def test_done_keys_match_the_schedule_slots_they_came_from(store: Store) -> None:
    plan = _plan()
    run_id = _sweep_run(store, plan)
    first_visit = plan.schedule.visits[0]
    finished = [s for s in plan.schedule.slots if s.visit_index == first_visit.index]
    finished.append(plan.schedule.slots[len(finished)])  # and half of the next visit
    for slot in finished:
        _round(store, run_id, NODE, slot.key)
    done = done_keys(store, run_id, NODE)
    assert done == {s.key for s in finished}
    left = remaining(plan.schedule, done)
    assert {s.key for s in left} == {s.key for s in plan.schedule.slots} - done
    assert len(left) == len(plan.schedule.slots) - len(finished)


# --------------------------------------------------------------------------- failed_arms


def test_failed_arms_lists_only_this_runs_failed_arms_with_reasons(store: Store) -> None:
    plan = _plan()
    run_a, run_b = _sweep_run(store, plan), _sweep_run(store, plan)
    for run_id in (run_a, run_b):
        store.insert_many(
            "arms",
            [
                {"run_id": run_id, "name": a.name, "on_json": sorted(a.on), "settings_json": {}}
                for a in plan.arms
            ],
        )
    assert failed_arms(store, run_a) == {}
    store.update(
        "arms",
        {"run_id": run_a, "name": "+kubeAPIQPS"},
        {"status": "failed", "failure": "healthz: the kubelet is not running"},
    )
    store.update(
        "arms", {"run_id": run_b, "name": "combined"}, {"status": "failed", "failure": "other"}
    )
    assert failed_arms(store, run_a) == {"+kubeAPIQPS": "healthz: the kubelet is not running"}
    assert failed_arms(store, run_b) == {"combined": "other"}
    assert failed_arms(store, "no-such-run") == {}


# --------------------------------------------------------------------------- resume_plan_check


def test_resume_plan_check_accepts_the_same_plan_rebuilt(store: Store) -> None:
    run_id = _sweep_run(store, _plan())
    plan = _plan()
    # no error: same playbook, seed, rounds, sizes; the plan itself, rounds started alike
    assert resume_plan_check(store, run_id, plan) is plan


def test_a_run_from_before_the_random_start_resumes_without_it(store: Store) -> None:
    """Its first rounds started at once after the watch: so do the rest (one method per run)."""
    old = _plan().to_dict()
    generator = old["generator"]
    assert isinstance(generator, dict)
    del generator["start_dither_s"]
    run_id = new_run(store, "sweep", command="test", node_name=NODE, plan=old)
    resumed = resume_plan_check(store, run_id, _plan())
    assert _plan().playbook.generator.start_dither_s == 1.0
    assert resumed.playbook.generator.start_dither_s == 0.0
    assert resumed.schedule == _plan().schedule


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 8},
        {"rounds": 3},
        {"sizes": (10,)},
        {"sizes": (20, 10)},
        {"factors": ("kubeAPIQPS",)},
        {"attribution": True},
    ],
    ids=["seed", "rounds", "sizes", "size-order", "factors", "arms"],
)
def test_resume_plan_check_refuses_a_different_plan(store: Store, change: dict[str, Any]) -> None:
    run_id = _sweep_run(store, _plan())
    with pytest.raises(UserError, match="planned differently") as err:
        resume_plan_check(store, run_id, _plan(**change))
    assert run_id in str(err.value)


def test_resume_plan_check_refuses_a_batch_run_and_an_unknown_run(store: Store) -> None:
    plan = _plan()
    batch_run = _sweep_run(store, plan, kind="batch")
    with pytest.raises(UserError, match="not a sweep"):
        resume_plan_check(store, batch_run, plan)
    with pytest.raises(UserError, match="no run"):
        resume_plan_check(store, "20250101-000000-000000", plan)


# --------------------------------------------------------------------------- summary_rows


def _frame(rows: list[tuple[int, str, float | None, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["size", "arm", "batch_ready_s", "accepted", "warmup"])


def test_summary_rows_per_size_means_and_change_vs_baseline() -> None:
    frame = _frame(
        [
            (10, "baseline", 2.0, 1, 0),
            (10, "baseline", 4.0, 1, 0),
            (10, "+A", 2.4, 1, 0),
            (10, "+A", 2.6, 1, 0),
            (10, "+A", 99.0, 0, 0),  # rejected: left out
            (10, "+A", 50.0, 1, 1),  # warm-up: left out
            (20, "baseline", 8.0, 1, 0),
            (20, "+A", 10.0, 1, 0),
        ]
    )
    headers, rows = summary_rows(frame)
    assert headers == ["size", "arm", "rounds", "mean batch ready (s)", "change vs baseline"]
    by_key = {(r[0], r[1]): r[2:] for r in rows}
    assert by_key == {
        (10, "+A"): [2, 2.5, "-16.7 %"],
        (10, "baseline"): [2, 3.0, ""],
        (20, "+A"): [1, 10.0, "+25.0 %"],
        (20, "baseline"): [1, 8.0, ""],
    }
    assert [r[0] for r in rows] == [10, 10, 20, 20]  # sizes in ascending order
    for r in rows:
        assert type(r[0]) is int and type(r[2]) is int and type(r[3]) is float


def test_summary_rows_without_baseline_or_rounds() -> None:
    _, rows = summary_rows(_frame([(10, "+A", 2.0, 1, 0), (10, "+B", 3.0, 1, 0)]))
    assert [r[4] for r in rows] == ["", ""]
    assert summary_rows(_frame([]))[1] == []
    # every round rejected: nothing to summarise, no error
    assert summary_rows(_frame([(10, "baseline", None, 0, 0)]))[1] == []


# --------------------------------------------------------------------------- resume slots


def _resumed_visits(store: Store, plan: SweepPlan, run_id: str) -> list[tuple[int, list[RoundKey]]]:
    """Which rounds NodeSweep.run hands to each visit it configures, on a scripted fake node."""
    seen: list[tuple[int, list[RoundKey]]] = []

    def emit(kind: str, data: dict[str, Any]) -> None:
        if kind == "round_start":
            slot = data["slot"]
            if not seen or seen[-1][0] != slot.visit_index:
                seen.append((slot.visit_index, []))
            seen[-1][1].append(slot.key)

    node = FakeNode(NODE).expect("preflight", "namespace abtest")
    worker = NodeSweep(
        plan,
        plan.profiles[0],
        store,
        run_id,
        SweepOptions(),
        emit,
        threading.Event(),
        FakeKit(node),
    )
    assert worker.run().status == "finished"
    node.verify()
    assert node.calls.count("restart") == len(seen)  # one restart per visit configured
    return seen


def test_resume_runs_only_missing_rounds_and_redoes_the_warmup_of_a_resumed_visit(
    store: Store,
) -> None:
    plan = _plan(warmup=True)
    run_id = _sweep_run(store, plan)
    slots = plan.schedule.slots
    v0 = [s for s in slots if s.visit_index == 0]  # warm-up + 2 sizes
    v1 = [s for s in slots if s.visit_index == 1]
    assert v0[0].warmup and not any(s.warmup for s in v0[1:])
    # visit 0 finished; visit 1 stopped after its warm-up and first measured round
    for s in [*v0, *v1[:2]]:
        _round(store, run_id, NODE, s.key)
    expected = remaining(plan.schedule, done_keys(store, run_id, NODE))
    seen = _resumed_visits(store, plan, run_id)
    assert [i for i, _ in seen] == [v.index for v in plan.schedule.visits[1:]]
    # the resumed visit restarts the kubelet, so its warm-up runs again, then what is left
    assert seen[0][1] == [v1[0].key, v1[2].key]
    # every round the sweep ran is now in the store: the resumed run is complete
    assert done_keys(store, run_id, NODE) == {s.key for s in plan.schedule.slots}
    assert [k for _, keys in seen for k in keys] == [s.key for s in expected]


def test_resume_skips_arms_that_failed_to_apply(store: Store) -> None:
    plan = _plan()
    run_id = _sweep_run(store, plan)
    store.insert_many(
        "arms",
        [
            {"run_id": run_id, "name": a.name, "on_json": sorted(a.on), "settings_json": {}}
            for a in plan.arms
        ],
    )
    store.update(
        "arms", {"run_id": run_id, "name": "combined"}, {"status": "failed", "failure": "x"}
    )
    seen = _resumed_visits(store, plan, run_id)
    ran = [plan.schedule.visits[i].arm for i, _ in seen]
    assert "combined" not in ran
    assert len(ran) == len(plan.schedule.visits) - plan.schedule.blocks


# --------------------------------------------------------------------------- several nodes


def test_a_failure_on_one_node_stops_the_other_and_both_are_restored(store: Store) -> None:
    """Two workers on scripted fake nodes: node-a cannot apply (fail-fast), so node-b stops at
    its next round boundary (or has finished by then); both nodes end as found, each worker
    wrote through its own database connection, and the run is recorded failed."""
    a = FakeNode("node-a", failing={"kubeAPIQPS": "the kubelet refused kubeAPIQPS"})
    b = FakeNode("node-b")
    plan = _plan()
    plan = dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], [a, b]))
    a.expect("preflight", "lock", "restart", "rollback", "unlock", "close")
    b.expect("preflight", "namespace abtest", "close")
    events: list[tuple[str, dict[str, Any]]] = []
    with pytest.raises(ApplyFailed, match="refused kubeAPIQPS"):
        run_sweep(
            plan,
            store,
            SweepOptions(fail_fast=True),
            lambda kind, data: events.append((kind, data)),
            kit=FakeKit(a, b),
        )
    a.verify()
    b.verify()
    assert not [c for c in a.calls if c.startswith("round")]  # node-a never measured
    # node-b stopped wherever the stop found it; whatever it changed, it put back
    assert "lock" not in b.calls or b.calls[-3:] == ["restore", "unlock", "close"], b.calls
    run_id = next(d["run_id"] for k, d in events if k == "run")
    row = store.run_row(run_id)
    assert row["status"] == "failed" and "refused kubeAPIQPS" in row["stop_reason"]


def _runtime_catalog(tmp_path: Any, name: str, runtime: str) -> str:
    path = tmp_path / name
    path.write_text(
        "catalog: rt\nfactors:\n"
        f"  - {{name: rt, kind: runtime_class, on: {runtime}, off: runc, summary: s}}\n"
        "  - {name: kubeAPIQPS, kind: config_field, on: 3, off: 50, summary: s}\n"
    )
    return str(path)


def test_resume_plan_check_refuses_a_changed_pod_part(store: Store, tmp_path: Any) -> None:
    # same arm names and kubelet settings, but the runtime arm now runs another RuntimeClass:
    # resuming would mix two runtimes under one arm name
    before = _plan(catalog=_runtime_catalog(tmp_path, "a.yaml", "crun"))
    run_id = _sweep_run(store, before)
    resume_plan_check(store, run_id, _plan(catalog=_runtime_catalog(tmp_path, "b.yaml", "crun")))
    with pytest.raises(UserError, match="planned differently"):
        resume_plan_check(
            store, run_id, _plan(catalog=_runtime_catalog(tmp_path, "c.yaml", "youki"))
        )
