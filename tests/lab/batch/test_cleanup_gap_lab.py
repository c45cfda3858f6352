"""The gap between rounds, cut further (issue 15 section 2), on the real lab.

Two rounds in one namespace (the second's namespace holds the first's events, as a sweep's
does), each cleaned by stopping its own sandboxes (several stop commands at once). The
events a round stores, listed as of one resourceVersion while the node was cleaned, equal a
listing taken the plain way at the same moment (while the pods still exist, by ``verify``):
every pod's events, none of the earlier round's, none of the deletion's. The node is clean
before the next round (no pod in the API, the sandbox count back at its baseline).

Run under the lab lock: ``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -q -m lab
tests/lab/batch/test_cleanup_gap_lab.py``.
"""

from __future__ import annotations

from collections import Counter

import pytest
from lab_sandboxes import settled_sandbox_count

from abtest.batch.collect import event_records
from abtest.batch.round import run_round
from abtest.batch.round_records import EventRecord
from abtest.batch.run_record import new_run
from abtest.batch.spec import RoundSpec
from abtest.batch.template import MANAGED_BY, MANAGED_BY_KEY
from abtest.cluster.client import connect
from abtest.cluster.namespaces import delete_namespace, ensure_namespace
from abtest.cluster.pods import count_pods, list_pod_events
from abtest.config.playbook import Generator, NodeProfile, Workload
from abtest.node.session import NodeSession
from abtest.store.db import Store

pytestmark = pytest.mark.lab

NAMESPACE = "abtest-gap-lab"
SIZE = 10


def _key(e: EventRecord) -> tuple[str | None, str, str, int, str]:
    return (e.pod, e.reason, e.message, e.count, e.type)


def test_stored_events_equal_a_listing_at_the_same_moment_and_the_node_is_clean(
    lab_profile: NodeProfile, store: Store
) -> None:
    cluster = connect(lab_profile.kubeconfig, pool_size=40)
    ensure_namespace(cluster, NAMESPACE)
    run_id = new_run(store, "batch", command="test", node_name=lab_profile.node_name)
    plain: dict[str, list[EventRecord]] = {}

    def list_now(tag: str) -> None:
        # the plain listing, while the round's pods still exist (after the round's snapshot)
        names = {f"abt-{tag}-{i:04d}" for i in range(SIZE)}
        plain[tag] = event_records(list_pod_events(cluster, NAMESPACE, names))

    results = []
    clean = []
    try:
        with NodeSession(lab_profile) as node:
            baseline = settled_sandbox_count(cluster, node, lab_profile.node_name)
            for _ in range(2):
                result = run_round(
                    cluster,
                    RoundSpec(
                        node_name=lab_profile.node_name,
                        namespace=NAMESPACE,
                        size=SIZE,
                        run_id=run_id,
                        workload=Workload(cpu_request="10m"),
                        generator=Generator(observe_s=1.0),
                        sandbox_count=node.sandbox_count,
                        clean_sandboxes=lambda tag: node.clean_round_sandboxes(NAMESPACE, tag),
                        verify=list_now,
                    ),
                )
                clean.append(
                    (
                        count_pods(cluster, NAMESPACE, f"{MANAGED_BY_KEY}={MANAGED_BY}"),
                        node.sandbox_count(),
                    )
                )
                results.append(result)
    finally:
        delete_namespace(cluster, NAMESPACE)

    for result, (pods_left, sandboxes) in zip(results, clean, strict=True):
        assert result.accepted, result.reason
        assert result.cleanup_ok, result.cleanup_note
        assert (pods_left, sandboxes) == (0, baseline)
        assert result.sandbox_baseline == baseline and result.sandbox_after == baseline
        names = {p.name for p in result.pods}
        stored = Counter(_key(e) for e in result.events)
        assert stored == Counter(_key(e) for e in plain[result.round_tag])
        assert {e.pod for e in result.events} == names  # every pod's, no other round's
        started = [e for e in result.events if e.reason == "Started"]
        assert {e.pod for e in started} == names
        assert not [e for e in result.events if e.reason == "Killing"]
        parts = {g.part: g for g in result.gap_parts if g.phase == "after"}
        assert parts["events_wait"].summed and not parts["events_list"].summed
        assert parts["events_list"].seconds > 0
