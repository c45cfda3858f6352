"""One controller for the concurrent-writers test: a whole sweep on a scripted fake node
(abtest.testing.FakeKit), writing to the shared database given on the command line, started at
an agreed moment so that two of them write at once. Prints its run id and round count."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep import SweepOptions, run_sweep
from abtest.engine.sweep_plan import build_plan
from abtest.store.db import Store
from abtest.testing import FakeKit, FakeNode, fake_profiles


def main(url: str, node_name: str, start_at: float, rounds: int) -> None:
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=rounds, sizes=(10, 20), seed=3))
    node = FakeNode(node_name)
    plan = dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], [node]))
    with Store(url) as store:
        time.sleep(max(0.0, start_at - time.time()))
        result = run_sweep(
            plan, store, SweepOptions(command=f"controller {node_name}"), lambda k, d: None,
            kit=FakeKit(node),
        )  # fmt: skip
    node.verify()
    print(json.dumps({"run_id": result.run_id, "status": result.status, "rounds": sum(
        n.rounds for n in result.nodes)}))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
