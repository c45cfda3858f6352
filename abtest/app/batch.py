"""`abtest batch`'s use-case: one round on the node as it is (no config change), stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from abtest.batch.record import record_round
from abtest.batch.round import run_round
from abtest.batch.round_records import RoundResult
from abtest.batch.run_record import finish_run, new_run, probe_environment
from abtest.batch.spec import RoundSpec
from abtest.batch.template import round_selector
from abtest.cluster.client import connect
from abtest.cluster.namespaces import ensure_namespace
from abtest.cluster.pods import list_pods
from abtest.cluster.runtimeclasses import runtime_class_handler
from abtest.config.playbook import Generator, NodeProfile, Playbook, Workload, load_playbook
from abtest.engine.pod_arms import check_arm_runtime, round_verifier
from abtest.errors import Interrupted
from abtest.lab import api_proxy
from abtest.node.session import NodeSession
from abtest.store.db import DbTarget, Store


@dataclass(frozen=True)
class BatchRequest:
    """One batch: the node (kube flags applied), its size, and the method. The workload,
    generator and namespace come from ``playbook`` when given, else the reference method's
    defaults; a generator value given here wins over either."""

    profile: NodeProfile
    pods: int
    playbook: str | None = None
    namespace: str | None = None
    qps: float | None = None
    concurrency: int | None = None
    timeout_s: float | None = None
    observe_s: float | None = None
    db: DbTarget = None


@dataclass(frozen=True)
class SingleBatch:
    """The stored run and round, and the round's result."""

    run_id: str
    round_id: int
    result: RoundResult

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        measures = r.measures()
        return {
            "run_id": self.run_id,
            "round_id": self.round_id,
            "node": r.node_name,
            "namespace": r.namespace,
            "pods": r.size,
            "pods_ready": measures.pop("pods_ready"),
            "accepted": r.accepted,
            "reason": r.reason,
            "timed_out": r.timed_out,
            **measures,
            "cleanup_api_s": r.cleanup_api_s,
            "cleanup_ok": r.cleanup_ok,
            "phases_median_s": r.summary.phases,
            # Ready pods only, in pod-name order (a never-Ready pod has no latency)
            "pod_latencies_s": list(r.summary.latencies_s),
            "notes": r.notes,
        }


def single_batch(req: BatchRequest, say: Callable[[str], None]) -> SingleBatch:
    """Run, store and return one batch on the node as it is."""
    book = load_playbook(req.playbook) if req.playbook else None
    workload = book.workload if book else Workload()
    gen = (book.generator if book else Generator()).with_overrides(
        qps=req.qps, concurrency=req.concurrency, timeout_s=req.timeout_s, observe_s=req.observe_s
    )
    with Store(req.db) as store:
        run_id, round_id, result = run_single_batch(
            store,
            req.profile,
            pods=req.pods,
            namespace=req.namespace or (book.namespace if book else "abtest"),
            workload=workload,
            generator=gen,
            playbook=book,
            say=say,
        )
    return SingleBatch(run_id, round_id, result)


def run_single_batch(
    store: Store,
    profile: NodeProfile,
    *,
    pods: int,
    namespace: str,
    workload: Workload,
    generator: Generator,
    playbook: Playbook | None,
    say: Callable[[str], None],
) -> tuple[str, int, RoundResult]:
    """Returns (run_id, round_id, result); the run is marked finished, failed or interrupted."""
    cluster = connect(
        profile.kubeconfig,
        context=profile.kube_context,
        pool_size=max(32, generator.concurrency + 8),
    )
    ensure_namespace(cluster, namespace)
    env = probe_environment(cluster, profile.node_name)
    env["transport"] = profile.reached_by  # how abtest reached the node (the report's Method)
    # a lab node's kubelet path through the latency proxy (`lab up --api-latency`)
    env |= api_proxy.run_env(profile.kubeconfig, profile.node_name)
    plan = {
        "size": pods,
        "namespace": namespace,
        "generator": vars(generator),
        "workload": vars(workload),
    }
    run_id = new_run(store, "batch", profile=profile, playbook=playbook, env=env, plan=plan)
    try:
        with NodeSession(profile) as node:
            # a workload with a RuntimeClass is checked as a runtime arm is: the class and its
            # handler exist before any pod, and every pod's sandbox ran under it after
            runtime = check_arm_runtime(
                "batch",
                workload.runtime_class,
                handler_of=lambda name: runtime_class_handler(cluster, name),
                node=node,
                profile=profile,
            )
            verify = (
                None
                if runtime is None
                else round_verifier(
                    runtime,
                    pods=lambda tag: list_pods(cluster, namespace, round_selector(tag))[0],
                    handlers=lambda tag: node.round_handlers(namespace, tag),
                )
            )
            result = run_round(
                cluster,
                RoundSpec(
                    node_name=profile.node_name,
                    namespace=namespace,
                    size=pods,
                    run_id=run_id,
                    workload=workload,
                    generator=generator,
                    sandbox_count=node.sandbox_count,
                    reap_sandboxes=lambda: node.remove_stopped_sandboxes(namespace),
                    clean_sandboxes=lambda tag: node.clean_round_sandboxes(namespace, tag),
                    say=say,
                    verify=verify,
                    container_starts=lambda: node.container_starts(namespace),
                ),
            )
        round_id = record_round(store, run_id, result)
    except (KeyboardInterrupt, Interrupted):
        finish_run(store, run_id, "interrupted", "interrupted by the user")
        raise
    except BaseException as exc:
        finish_run(store, run_id, "failed", f"{type(exc).__name__}: {exc}")
        raise
    finish_run(store, run_id, "finished", None if result.cleanup_ok else result.cleanup_note)
    return run_id, round_id, result
