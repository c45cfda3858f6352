"""`abtest batch`'s use-case: one round on the node as it is (no config change), stored."""

from __future__ import annotations

from collections.abc import Callable

from abtest.batch.model import RoundResult
from abtest.batch.record import record_round
from abtest.batch.round import run_round
from abtest.batch.run_record import finish_run, new_run, probe_environment
from abtest.cluster.client import connect
from abtest.cluster.namespaces import ensure_namespace
from abtest.node.session import NodeSession
from abtest.node.signals import Interrupted
from abtest.playbook import Generator, NodeProfile, Playbook, Workload
from abtest.store.db import Store


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
    plan = {
        "size": pods,
        "namespace": namespace,
        "generator": vars(generator),
        "workload": vars(workload),
    }
    run_id = new_run(store, "batch", profile=profile, playbook=playbook, env=env, plan=plan)
    try:
        with NodeSession(profile) as node:
            result = run_round(
                cluster,
                node_name=profile.node_name,
                namespace=namespace,
                size=pods,
                run_id=run_id,
                workload=workload,
                generator=generator,
                sandbox_count=node.sandbox_count,
                reap_sandboxes=lambda: node.remove_stopped_sandboxes(namespace),
                say=say,
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
