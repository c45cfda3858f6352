"""A sweep process on fake nodes, for the signal tests (tests/unit/engine/test_sweep_signals.py):
``python tests/fake_sweep.py STATE_DIR DB NODE:HOLD[:RESTORE_STEPS] ...`` runs a sweep of the
lab-sweep playbook on :class:`abtest.testing.FakeNode` s whose state files a test watches."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from abtest.store.db import Store
from abtest.testing import FakeKit, FakeNode, fake_profiles


def main(argv: list[str]) -> int:
    """``fake_sweep.py STATE_DIR DB NODE:HOLD[:RESTORE_STEPS] ...``: run a sweep of the
    lab-sweep playbook on the fake nodes, exiting as the CLI does (128 + signum)."""
    from abtest.config.plan_options import PlanOptions
    from abtest.engine.sweep import SweepOptions, run_sweep
    from abtest.engine.sweep_plan import build_plan
    from abtest.errors import Interrupted

    state_dir, db = Path(argv[0]), Path(argv[1])
    nodes = []
    for spec in argv[2:]:
        name, hold, *steps = spec.split(":")
        nodes.append(
            FakeNode(
                name,
                hold=hold or None,
                restore_steps=int(steps[0]) if steps and steps[0].isdigit() else 0,
                restore_until_signal=steps == ["second-signal"],
                state_file=state_dir / f"{name}.json",
            )
        )
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=2, sizes=(10, 20), seed=7))
    plan = dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], nodes))

    def emit(kind: str, data: dict[str, Any]) -> None:
        print(kind, json.dumps(data, default=str), flush=True)

    with Store(db) as store:
        try:
            result = run_sweep(plan, store, SweepOptions(command="fake"), emit, kit=FakeKit(*nodes))
        except Interrupted as exc:
            print(f"interrupted: {exc}", flush=True)
            return exc.exit_code
    print(f"status: {result.status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
