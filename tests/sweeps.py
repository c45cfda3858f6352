"""A synthetic sweep stored as the sweep stores one (the report, stats and engine tests read it).

``build_sweep`` writes a run with its environment, arms with their factors, one visit per
(block, arm) with restart-to-healthy times, rounds with nearest-rank summaries computed from
their pods, every pod's timestamps, kubelet histogram deltas and sandbox-failure events. One
warm-up round and one rejected round carry absurd times, so that letting either into the
statistics would show.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from abtest.stats import nearest_rank
from abtest.store.db import Store

LAB = ("kubeAPIQPS", "ContainerCheckpoint", "KubeletPodResourcesGet")
KNOWN = "+kubeAPIQPS"  # the positive control: 1.5x slower
PLAYBOOK = "playbook: lab-sweep\ncatalog: lab\nsizes: [20, 50]\nrounds: 5\n"


@dataclass
class SweepSpec:
    run_id: str = "sweep-20251201-0001"
    factors: tuple[str, ...] = LAB
    arms: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("baseline", ()),
        ("+kubeAPIQPS", ("kubeAPIQPS",)),
        ("+ContainerCheckpoint", ("ContainerCheckpoint",)),
        ("+KubeletPodResourcesGet", ("KubeletPodResourcesGet",)),
        ("combined", LAB),
    )
    effects: dict[str, float] = field(default_factory=lambda: {"kubeAPIQPS": 1.5})
    blocks: int = 5
    sizes: tuple[int, ...] = (20, 50)
    design: str = "gates-all"
    seed: int = 20251201
    warmup: tuple[int, str, int] | None = (1, "baseline", 20)  # block, arm, size
    rejected: tuple[int, str, int] | None = (3, "+ContainerCheckpoint", 50)
    noise: float = 0.06


def _latencies(rng: np.random.Generator, n: int, scale: float, noise: float) -> np.ndarray:
    """Per-pod latency: a fixed part plus queueing that grows through the batch, skewed."""
    queue = np.sort(rng.uniform(0.0, 1.0, n)) * 0.018 * n
    return scale * (0.45 + queue) * np.exp(rng.normal(0.0, noise, n))


def build_sweep(store: Store, spec: SweepSpec | None = None) -> str:
    spec = spec or SweepSpec()
    rng = np.random.default_rng(spec.seed)
    run_id = spec.run_id
    store.insert(
        "runs",
        {
            "id": run_id,
            "kind": "sweep",
            "created_at": "2025-12-01T10:00:00.000+00:00",
            "finished_at": "2025-12-01T11:12:13.000+00:00",
            "status": "finished",
            "command": "abtest gates --all --playbook playbooks/lab-sweep.yaml",
            "profile_name": "lab",
            "node_name": "lab-node",
            "playbook_name": "lab-sweep",
            "playbook_text": PLAYBOOK,
            "playbook_sha256": hashlib.sha256(PLAYBOOK.encode()).hexdigest(),
            "catalog_name": "lab",
            "design": spec.design,
            "seed": spec.seed,
            "plan_json": {"blocks": spec.blocks, "sizes": list(spec.sizes)},
            "env_json": {
                "node": "lab-node",
                "kernel": "6.1.0-28-amd64",
                "kubelet_version": "v1.34.4",
                "containerd_version": "v1.7.28",
                "apiserver_version": "v1.34.4",
                "node_cpu": "2",
                "node_memory": "4022Mi",
                "tool_version": "0.1.0",
                "git_revision": "3f7f2c9",
            },
        },
    )
    for name, on in spec.arms:
        store.insert(
            "arms",
            {
                "run_id": run_id,
                "name": name,
                "on_json": list(on),
                "settings_json": {f"featureGates.{f}": f in on for f in spec.factors},
            },
        )
    block_effect = np.exp(rng.normal(0.0, 0.10, spec.blocks))
    ordinal = 0
    wall = 1_764_583_200.0
    for block in range(1, spec.blocks + 1):
        for arm_index in rng.permutation(len(spec.arms)):
            name, on = spec.arms[arm_index]
            visit = store.insert(
                "visits",
                {
                    "run_id": run_id,
                    "node_name": "lab-node",
                    "block": block,
                    "position": int(arm_index),
                    "arm": name,
                    "started_at": "2025-12-01T10:00:00.000+00:00",
                    "applied": 1,
                    "restart_to_healthz_s": float(1.8 + rng.uniform(0, 0.4)),
                    "restart_to_ready_s": float(3.5 + rng.uniform(0, 1.0)),
                    "restart_to_verified_s": float(4.5 + rng.uniform(0, 1.0)),
                    "verified_json": {f: f in on for f in spec.factors},
                },
            )
            scale = block_effect[block - 1] * math.prod(spec.effects.get(f, 1.0) for f in on)
            sizes = list(rng.permutation(spec.sizes))
            plans = [(int(s), False) for s in sizes]
            if spec.warmup and spec.warmup[:2] == (block, name):
                plans.insert(0, (spec.warmup[2], True))
            for size, warm in plans:
                ordinal += 1
                wall += 30.0
                rejected = not warm and spec.rejected == (block, name, size)
                odd = warm or rejected  # absurd times: must never reach the statistics
                lat = _latencies(rng, size, scale * (8.0 if odd else 1.0), spec.noise)
                sent = np.arange(size) * 0.001
                ready = sent + lat
                sandbox = 1 if (block + ordinal) % 7 == 0 else 0
                round_id = store.insert(
                    "rounds",
                    {
                        "run_id": run_id,
                        "visit_id": visit,
                        "node_name": "lab-node",
                        "block": block,
                        "arm": name,
                        "size": size,
                        "ordinal": ordinal,
                        "warmup": int(warm),
                        "started_wall": wall,
                        "accepted": int(not rejected),
                        "reason": "container restarted (1)" if rejected else None,
                        "pods_ready": size,
                        "batch_ready_s": float(ready.max()),
                        "p50_s": nearest_rank(lat, 50),
                        "p95_s": nearest_rank(lat, 95),
                        "p99_s": nearest_rank(lat, 99),
                        "mean_s": float(lat.mean()),
                        "submit_rate": 1000.0,
                        "restarts": int(rejected),
                        "sandbox_failures": sandbox,
                        "cleanup_s": float(2.0 + 0.05 * size),
                    },
                )
                store.insert_many(
                    "pods",
                    [
                        {
                            "round_id": round_id,
                            "name": f"abtest-{round_id}-{i:03d}",
                            "sent_s": float(sent[i]),
                            "response_s": float(sent[i] + 0.004),
                            "scheduled_s": float(sent[i] + 0.2 * lat[i]),
                            "ready_to_start_s": float(sent[i] + 0.6 * lat[i]),
                            "initialized_s": float(sent[i] + 0.7 * lat[i]),
                            "containers_ready_s": float(sent[i] + 0.95 * lat[i]),
                            "ready_s": float(ready[i]),
                            "http_status": 201,
                            "restarts": int(rejected and i == 0),
                            "server_created": wall + float(sent[i]),
                            "server_ready": wall + float(ready[i]),
                        }
                        for i in range(size)
                    ],
                )
                if sandbox:
                    store.insert(
                        "events",
                        {"round_id": round_id, "reason": "FailedCreatePodSandBox", "count": 1},
                    )
                store.insert_many(
                    "metric_deltas",
                    [
                        {
                            "round_id": round_id,
                            "metric": "kubelet_pod_start_sli_duration_seconds",
                            "labels": "",
                            "delta_sum": float(lat.sum() * 0.8),
                            "delta_count": float(size),
                        },
                        {
                            "round_id": round_id,
                            "metric": "kubelet_runtime_operations_duration_seconds",
                            "labels": 'operation_type="run_podsandbox"',
                            "delta_sum": float(size * 0.12 * scale),
                            "delta_count": float(size),
                        },
                        {
                            "round_id": round_id,
                            "metric": "kubelet_pleg_relist_duration_seconds",
                            "labels": "",
                            "delta_sum": float(10 * 0.008 * rng.uniform(0.9, 1.1)),
                            "delta_count": 10.0,
                        },
                    ],
                )
    return run_id
