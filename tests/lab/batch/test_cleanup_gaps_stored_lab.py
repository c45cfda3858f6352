"""The gaps between rounds on the real lab (issue 15 section 2): two real rounds stored as a
sweep stores them; each round's parts are present and add up, and the node is clean (no pod
left in the API, its sandbox count back at the pre-round value) before the next round starts.

Run under the lab lock: ``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -q -m lab
tests/lab/batch/test_cleanup_gaps_stored_lab.py``.
"""

from __future__ import annotations

import pytest
from lab_sandboxes import settled_sandbox_count

from abtest.batch.record import record_round
from abtest.batch.round import run_round
from abtest.batch.round_records import RoundResult
from abtest.batch.run_record import new_run
from abtest.batch.spec import RoundSpec
from abtest.batch.template import MANAGED_BY, MANAGED_BY_KEY
from abtest.cluster.client import connect
from abtest.cluster.namespaces import delete_namespace, ensure_namespace
from abtest.cluster.pods import count_pods
from abtest.config.playbook import Generator, NodeProfile, Workload
from abtest.node.session import NodeSession
from abtest.store.db import Store

pytestmark = pytest.mark.lab

NAMESPACE = "abtest-cleanup-lab"
AFTER_LAPS = [
    "watch_stop",
    "events",
    "metrics_after",
    "container_starts",
    "judge",
    "delete_call",
    "api_gone",
]


def test_round_parts_add_up_and_the_node_is_clean_between_rounds(
    lab_profile: NodeProfile, store: Store
) -> None:
    cluster = connect(lab_profile.kubeconfig, pool_size=40)
    ensure_namespace(cluster, NAMESPACE)
    run_id = new_run(store, "batch", command="test", node_name=lab_profile.node_name)
    try:
        with NodeSession(lab_profile) as node:
            before_all = settled_sandbox_count(cluster, node, lab_profile.node_name)
            results: list[RoundResult] = []
            clean_counts = []
            for _ in range(2):
                result = run_round(
                    cluster,
                    RoundSpec(
                        node_name=lab_profile.node_name,
                        namespace=NAMESPACE,
                        size=5,
                        run_id=run_id,
                        workload=Workload(cpu_request="10m"),
                        generator=Generator(observe_s=1.0),
                        sandbox_count=node.sandbox_count,
                        reap_sandboxes=lambda: node.remove_stopped_sandboxes(NAMESPACE),
                        # the lab profile's own listing (its lap is in AFTER_LAPS)
                        container_starts=lambda: node.container_starts(NAMESPACE),
                    ),
                )
                # what the next round starts from: checked independently of the round
                clean_counts.append(
                    (
                        count_pods(cluster, NAMESPACE, f"{MANAGED_BY_KEY}={MANAGED_BY}"),
                        node.sandbox_count(),
                    )
                )
                record_round(store, run_id, result, previous=results[-1] if results else None)
                results.append(result)
    finally:
        delete_namespace(cluster, NAMESPACE)

    for result, (pods_left, sandboxes) in zip(results, clean_counts, strict=True):
        assert result.accepted, result.reason
        assert result.cleanup_ok, result.cleanup_note
        # every pod's containers were found in the runtime's listing and joined by pod UID
        assert all(p.container_started_s is not None for p in result.pods), result.notes
        assert result.sandbox_baseline == before_all
        assert (pods_left, sandboxes) == (0, before_all)  # clean before the next round
        assert result.sandbox_after == before_all
    assert results[1].sandbox_baseline == results[0].sandbox_after

    rounds = store.rounds_frame(run_id)
    assert len(rounds) == 2
    for i, (rid, result) in enumerate(zip(rounds["id"], results, strict=True)):
        rows = store.query(
            "SELECT phase, part, seconds, summed FROM round_gaps WHERE round_id = ? "
            "ORDER BY phase, seq",
            (int(rid),),
        )
        laps = {(r["phase"], r["part"]): r["seconds"] for r in rows if r["summed"]}
        detail = {r["part"]: r["seconds"] for r in rows if not r["summed"]}
        after = [p for ph, p in laps if ph == "after"]
        before = [p for ph, p in laps if ph == "before"]
        # the events were listed (as of before the delete) while the node was cleaned
        assert after == [*AFTER_LAPS, "node_clean", "events_wait"]
        assert detail["events_list"] > 0
        expected_before = ["setup", "sandbox_baseline", "metrics_before", "watch_open",
                           "start_dither"]  # fmt: skip
        assert before == (["sweep"] if i else []) + [*expected_before, "first_create"]
        assert all(s >= 0 for s in laps.values())
        # the laps add up: to the stored totals, and the cleanup's own to its stored time
        row = rounds.iloc[i]
        assert row["gap_after_s"] == pytest.approx(
            sum(s for (ph, _), s in laps.items() if ph == "after")
        )
        assert row["gap_before_s"] == pytest.approx(
            sum(s for (ph, _), s in laps.items() if ph == "before")
        )
        cleanup_laps = sum(laps[("after", p)] for p in ("delete_call", "api_gone", "node_clean"))
        assert cleanup_laps == pytest.approx(row["cleanup_s"], abs=0.01)
        # the measured span and the two gaps cover the round from entry to return
        assert result.entered_mono is not None and result.returned_mono is not None
        span = result.returned_mono - result.entered_mono
        measured = (result.summary.batch_ready_s or 0.0) + result.observe_s
        gaps = row["gap_after_s"] + row["gap_before_s"] - laps.get(("before", "sweep"), 0.0)
        assert measured + gaps == pytest.approx(span, abs=0.6)
        # the node side: never more sandboxes removed than the round had pods (the kubelet's
        # GC may take some first, so not exactly 5)
        assert 0 <= detail["sandboxes_removed"] <= 5 and detail["node_polls"] >= 1
        assert 0 < detail["node_commands"] <= laps[("after", "node_clean")]
