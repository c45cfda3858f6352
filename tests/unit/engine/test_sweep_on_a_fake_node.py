"""The sweep over the real NodeController on a scripted fake node: NodeSweep is given its
controller through the NodeKit seam, and here that controller is the real one, on
abtest/testing/host.py. Every visit's values are verified by the controller's own code (after
a restart, or found already in effect), an arm whose setting does not take effect is rolled
back and skipped, and the node ends as found. (The batch rounds stay abtest/testing/node.py's.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep import SweepOptions, SweepResult, run_sweep
from abtest.engine.sweep_plan import SweepPlan, build_plan
from abtest.store.db import Store
from abtest.store.journal import RESTORED, Journal
from abtest.store.node_history import base_config
from abtest.testing import FakeHost, FakeNode, HostKit, fake_profiles
from abtest.testing.host import CONFIG


def _sweep(
    tmp_path: Path, store: Store, host: FakeHost
) -> tuple[SweepResult, list[tuple[str, Any]], SweepPlan]:
    node = FakeNode(host.name)
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=2, sizes=(10,), seed=7))
    plan = dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], [node]))
    events: list[tuple[str, Any]] = []
    result = run_sweep(
        plan,
        store,
        SweepOptions(command="test"),
        lambda kind, data: events.append((kind, data)),
        kit=HostKit(host, node),
    )
    node.verify()
    return result, events, plan


def _visits(store: Store, run_id: str) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT arm, applied, verified_json, error FROM visits WHERE run_id = ? ORDER BY id",
        (run_id,),
    )
    return [dict(zip(("arm", "applied", "verified", "error"), r, strict=True)) for r in rows]


def test_every_visit_is_verified_by_the_controller_and_the_node_restored(
    tmp_path: Path, store: Store
) -> None:
    host = FakeHost(tmp_path / "node")
    result, events, plan = _sweep(tmp_path, store, host)
    assert result.status == "finished"
    visits = _visits(store, result.run_id)
    assert len(visits) == 10 and all(v["applied"] == 1 for v in visits)  # 5 arms x 2 blocks
    restarted = [d for k, d in events if k == "applied" and d["restart_to_verified_s"]]
    assert restarted  # the first visit at least
    assert host.calls.count("restart") == len(restarted) + 1  # and the final restore
    settings = {a.name: a.settings_dict() for a in plan.arms}
    for v in visits:  # what the kubelet showed at each visit, checked by the controller
        verified = json.loads(v["verified"])
        assert set(verified) == set(settings[v["arm"]])  # restarted or already in effect
        assert all(row["expected"] == row["configz"] for row in verified.values())
        if v["arm"] == "+kubeAPIQPS":
            assert verified["kubeAPIQPS"] == {"expected": 3, "configz": 3}
            assert verified["kubeAPIBurst"] == {"expected": 10, "configz": 10}
    entries = Journal(store).history(host.name)
    assert [e.state for e in entries] == [RESTORED]  # one entry across every arm, closed
    host.verify()


def test_an_arm_whose_setting_does_not_take_effect_is_rolled_back_and_skipped(
    tmp_path: Path, store: Store
) -> None:
    host = FakeHost(tmp_path / "node", ignores=("kubeAPIBurst",))
    result, events, _ = _sweep(tmp_path, store, host)
    assert result.status == "finished"
    failed = result.nodes[0].failed_arms
    assert set(failed) == {"+kubeAPIQPS", "combined"}  # both set kubeAPIBurst
    assert all("kubeAPIBurst" in why and "rolled back" in why for why in failed.values())
    visits = _visits(store, result.run_id)
    skipped = [v for v in visits if v["arm"] in failed]
    assert len(skipped) == 2 and all(v["applied"] == 0 and v["error"] for v in skipped)
    ran = {k for k, _ in events}
    assert "arm_failed" in ran
    host.verify()


def test_the_sweep_journals_its_changes_under_its_run_id(tmp_path: Path, store: Store) -> None:
    """The controller a sweep is given names the run in every journal entry it writes, so
    the run's base config is found by its id (abtest history's "what changed")."""
    host = FakeHost(tmp_path / "node")
    result, _, _ = _sweep(tmp_path, store, host)
    entries = Journal(store).history(host.name)
    assert entries and all(e.run_id == result.run_id for e in entries)
    assert base_config(store, result.run_id, host.name) == CONFIG
    host.verify()
