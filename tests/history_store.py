"""A results database holding a node's nightly-like series of runs, written through the same
store API a sweep uses (run with its environment, arms, applied visits, rounds)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from abtest.batch.record import record_round
from abtest.batch.run_record import new_run
from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep_plan import build_plan
from abtest.store.db import Store
from abtest.store.journal import Journal
from abtest.store.tables import ArmRow
from abtest.testing import fake_round

NODE = "node-h"


def add_runs(
    store: Store,
    levels: Sequence[float],
    *,
    kubelet: Sequence[str] | None = None,
    rounds: int = 5,
    noise: float = 0.02,
    seed: int = 1,
    size: int = 10,
    nodes: Sequence[str] = (NODE,),
    configs: Sequence[str] | None = None,
) -> list[str]:
    """One run per level (seconds, the arm's true batch ready time), oldest first, each on
    every one of ``nodes``; the nodes report ``kubelet[i]`` as their kubelet version and, with
    ``configs``, the run journals ``configs[i]`` as the kubelet config it found there."""
    generator = build_plan(PlanOptions(playbook="lab-sweep")).playbook.generator
    rng = np.random.default_rng(seed)
    ids = []
    for i, level in enumerate(levels):
        version = kubelet[i] if kubelet else "v1.36.0"
        per_node = {
            n: {"tool_version": "0.1.0",
                "node": {"node_name": n, "kubelet_version": version, "kernel": "6.1"}}
            for n in nodes
        }  # fmt: skip
        env = per_node[nodes[0]] | {"nodes": per_node}  # as a sweep stores it
        run_id = new_run(store, "sweep", command="t", node_name=nodes[0], env=env)
        store.arms.add(run_id, [ArmRow("baseline", [], {})])
        for node in nodes:
            if configs:
                Journal(store, run_id=run_id).begin(
                    node_name=node, profile_name="p", path="/var/lib/kubelet/config.yaml",
                    original=configs[i].encode(), applied={},
                )  # fmt: skip
            visit = store.visits.begin(run_id, node=node, block=0, position=0, arm="baseline")
            store.visits.applied(
                visit, restart_to_healthz_s=None, restart_to_ready_s=None,
                restart_to_verified_s=None, verified={}, config_sha256=f"cfg-{version}",
            )  # fmt: skip
            for b in range(rounds):
                seconds = float(level * np.exp(rng.normal(0, noise)))
                result = fake_round(node, "abtest", size, generator, seconds=seconds)
                record_round(store, run_id, result, arm="baseline", block=b, visit_id=visit)
        ids.append(run_id)
    return ids
