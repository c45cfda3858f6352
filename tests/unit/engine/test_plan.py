"""`abtest plan`: arms and schedule from a playbook plus flags; nothing is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep_plan import build_plan, estimate
from abtest.errors import UserError


def test_gates_all_on_the_lab_catalog() -> None:
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=2, sizes=(10,)))
    names = [a.name for a in plan.arms]
    assert names == [
        "baseline",
        "+kubeAPIQPS",
        "+ContainerCheckpoint",
        "+PLEGOnDemandRelist",
        "combined",
    ]
    baseline = plan.arms[0].settings_dict()
    assert baseline == {
        "kubeAPIQPS": 50,
        "kubeAPIBurst": 100,
        "featureGates.ContainerCheckpoint": True,
        "featureGates.PLEGOnDemandRelist": False,
    }
    assert len(plan.schedule.visits) == 2 * 5
    assert [p.node_name for p in plan.profiles] == ["abtest-lab"]


def test_attribution_adds_leave_one_out_and_factorial_has_all_subsets() -> None:
    attr = build_plan(PlanOptions(attribution=True))
    assert {"combined-kubeAPIQPS", "combined-ContainerCheckpoint"} <= {a.name for a in attr.arms}
    fact = build_plan(PlanOptions(design="factorial"))
    assert len(fact.arms) == 8 and len({a.on for a in fact.arms}) == 8


def test_factor_names_limit_the_sweep() -> None:
    plan = build_plan(PlanOptions(factors=("kubeAPIQPS",)))
    assert [a.name for a in plan.arms] == ["baseline", "+kubeAPIQPS"]
    with pytest.raises(UserError, match="unknown factor"):
        build_plan(PlanOptions(factors=("NoSuchGate",)))


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    a = build_plan(PlanOptions(seed=7)).schedule
    b = build_plan(PlanOptions(seed=7)).schedule
    c = build_plan(PlanOptions(seed=8)).schedule
    assert a == b and a.visits != c.visits


def test_estimate_uses_history_when_there_is_some() -> None:
    plan = build_plan(PlanOptions(rounds=1, sizes=(10,)))
    default = estimate(plan, None)
    measured = estimate(plan, {"restart_s": [5.0], "cleanup_s": [2.0], "batch_10": [3.0]})
    assert "defaults" in default.source and "measured" in measured.source
    # a round: its batch, the observation window, the random start's mean (0.5 s), the cleanup
    assert measured.seconds == pytest.approx(5 * 5.0 + 5 * (3.0 + 10.0 + 0.5 + 2.0))


def test_plan_cli_json_touches_nothing(tmp_path: Path) -> None:
    db = tmp_path / "nothing-here.sqlite"
    env = {**os.environ, "ABTEST_DB": str(db)}
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "plan", "--json", "--rounds", "2", "--sizes", "10,20"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schedule"]["restarts"] == 10 and data["schedule"]["measured_rounds"] == 20
    assert data["estimate"]["seconds"] > 0
    assert not db.exists()
