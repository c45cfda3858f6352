"""The batch engine against the real lab (`abtest lab up`). Run under the lab lock:
``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest tests/lab/batch/test_batch_lab.py``."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from abtest.batch.record import record_round
from abtest.batch.round import run_round
from abtest.batch.run_record import finish_run, new_run, probe_environment
from abtest.batch.spec import RoundSpec, WatchOptions
from abtest.cli.main import app
from abtest.cluster.client import Cluster, connect
from abtest.cluster.namespaces import (
    MANAGED_BY,
    MANAGED_BY_KEY,
    NamespaceNotOwned,
    delete_namespace,
    ensure_namespace,
)
from abtest.cluster.pods import count_pods, delete_pods
from abtest.config.playbook import Generator, NodeProfile, Workload
from abtest.lab import components
from abtest.lab.control import restart_component
from abtest.lab.layout import LabState, Paths
from abtest.node.session import NodeSession
from abtest.stats.percentiles import nearest_rank
from abtest.store.db import Store

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def cluster(lab_profile: NodeProfile) -> Cluster:
    return connect(lab_profile.kubeconfig, pool_size=160)


@pytest.fixture()
def node(lab_profile: NodeProfile) -> Iterator[NodeSession]:
    with NodeSession(lab_profile) as session:
        yield session


@pytest.fixture()
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"abtest-t-{secrets.token_hex(4)}"
    assert ensure_namespace(cluster, name) is True
    yield name
    # not reused: no need to wait the ~5 s the namespace controller takes to finish it
    delete_namespace(cluster, name, wait_s=None)


def test_twenty_pod_round_accepted_stored_and_recomputable(
    cluster: Cluster, node: NodeSession, namespace: str, lab_profile: NodeProfile, store: Store
) -> None:
    baseline = node.sandbox_count()
    env = probe_environment(cluster, lab_profile.node_name)
    assert env["node"]["kubelet_version"].startswith("v1.")
    assert env["api_server"]["git_version"].startswith("v1.")
    run_id = new_run(store, "batch", profile=lab_profile, env=env)
    result = run_round(
        cluster,
        RoundSpec(
            node_name=lab_profile.node_name,
            namespace=namespace,
            size=20,
            run_id=run_id,
            generator=Generator(observe_s=3.0),
            sandbox_count=node.sandbox_count,
            # the cleanup `abtest batch` does: without it the round waits for the kubelet's
            # sandbox GC (about a minute) and leaves the next test's baseline unsettled
            reap_sandboxes=lambda: node.remove_stopped_sandboxes(namespace),
            clean_sandboxes=lambda tag: node.clean_round_sandboxes(namespace, tag),
        ),
    )
    assert result.accepted, result.reason
    assert len(result.summary.latencies_s) == 20
    assert result.summary.restarts == 0 and result.summary.ready_regressions == 0
    assert result.summary.create_failures == 0
    assert result.summary.batch_ready_s is not None and result.summary.p99_s is not None
    assert result.summary.batch_ready_s >= result.summary.p99_s
    assert result.summary.submit_rate and result.summary.submit_rate > 0
    assert {p.http_status for p in result.pods} == {201}
    assert all(p.scheduled_s is not None and p.ready_to_start_s is not None for p in result.pods)
    assert all(p.server_created and p.server_ready for p in result.pods)
    # the kubelet's own pod-start histogram moved by (about) the batch
    sli = [m for m in result.metric_deltas if m.metric == "kubelet_pod_start_sli_duration_seconds"]
    assert sli and sli[0].delta_count >= 1
    # the lab's kubelet has a cluster DNS address, as every real node's has: no pod of the
    # batch falls back to the host's resolv.conf with a warning event at each sync
    assert result.events and not [e for e in result.events if e.reason == "MissingClusterDNS"]
    # cleanup: gone from the API and the node back at its sandbox baseline
    assert result.cleanup_ok, result.cleanup_note
    assert result.cleanup_s is not None and result.cleanup_s > 0
    assert result.sandbox_baseline == baseline
    assert count_pods(cluster, namespace, f"{MANAGED_BY_KEY}={MANAGED_BY}") == 0
    assert node.sandbox_count() <= baseline

    round_id = record_round(store, run_id, result)
    finish_run(store, run_id)
    stored = store.rounds_frame(run_id).iloc[0]
    assert stored["id"] == round_id and stored["accepted"] == 1 and stored["pods_ready"] == 20
    pods = store.pods_frame(run_id)
    assert len(pods) == 20
    latencies = (pods["ready_s"] - pods["sent_s"]).tolist()
    for q, col in ((50, "p50_s"), (95, "p95_s"), (99, "p99_s")):
        assert nearest_rank(latencies, q) == pytest.approx(stored[col], abs=1e-12)
    assert stored["batch_ready_s"] == pytest.approx(pods["ready_s"].max() - pods["sent_s"].min())
    assert stored["batch_ready_s"] >= stored["p99_s"]
    assert json.loads(store.run_row(run_id)["env_json"])["node"]["node_name"] == "abtest-lab"


def test_missing_image_times_out_fails_acceptance_and_is_cleaned(
    cluster: Cluster, node: NodeSession, namespace: str, lab_profile: NodeProfile
) -> None:
    baseline = node.sandbox_count()
    result = run_round(
        cluster,
        RoundSpec(
            node_name=lab_profile.node_name,
            namespace=namespace,
            size=2,
            run_id="t-missing-image",
            # a registry on loopback that refuses: the pull fails at once and no request
            # (not even a DNS lookup of docker.io) leaves the machine
            workload=Workload(image="127.0.0.1:1/abtest-no-such-image:0.0.0"),
            generator=Generator(timeout_s=10.0, observe_s=1.0),
            sandbox_count=node.sandbox_count,
            reap_sandboxes=lambda: node.remove_stopped_sandboxes(namespace),
            clean_sandboxes=lambda tag: node.clean_round_sandboxes(namespace, tag),
        ),
    )
    assert not result.accepted
    assert result.timed_out
    assert result.reason is not None and "2 of 2 pods never Ready within the 10 s" in result.reason
    assert result.summary.pods_ready == 0 and result.summary.latencies_s == ()
    assert result.summary.batch_ready_s is None and result.summary.p50_s is None
    assert all(p.scheduled_s is not None for p in result.pods)  # they got that far
    assert result.cleanup_ok, result.cleanup_note
    assert count_pods(cluster, namespace, f"{MANAGED_BY_KEY}={MANAGED_BY}") == 0
    assert node.sandbox_count() <= baseline


def _expire_old_resource_versions() -> None:
    """Make resourceVersion "1" really gone on any lab, fresh or old: compact etcd to its
    current revision, then restart the API server so its watch cache starts there too (on
    a fresh lab the cache still holds everything since revision 1)."""
    paths = Paths()
    ports = LabState.load(paths).ports  # type: ignore[union-attr]

    def post(path: str, body: dict[str, object]) -> dict[str, object]:
        # etcd takes only the API server's client certificate (issue 11 item 9).
        return dict(components.etcd_post(paths, ports, path, body))

    header = post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]
    revision = int(header["revision"])  # type: ignore[index]
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    restart_component("kube-apiserver", say=lambda _: None)


def test_watch_survives_drops_and_expired_resource_version(
    cluster: Cluster, node: NodeSession, namespace: str, lab_profile: NodeProfile
) -> None:
    # resourceVersion "1" is compacted away (410 Gone -> re-list); a 1 s server-side timeout
    # ends the stream repeatedly (re-opened from the last resourceVersion).
    _expire_old_resource_versions()
    result = run_round(
        cluster,
        RoundSpec(
            node_name=lab_profile.node_name,
            namespace=namespace,
            size=3,
            run_id="t-watch",
            generator=Generator(observe_s=2.5),
            scrape_metrics=False,
            watch_options=WatchOptions(server_timeout_s=1, start_resource_version="1"),
            # cleaned as `abtest batch` cleans: stopped sandboxes left for the kubelet's GC
            # held the next test's settled baseline up for ~20 s
            sandbox_count=node.sandbox_count,
            reap_sandboxes=lambda: node.remove_stopped_sandboxes(namespace),
            clean_sandboxes=lambda tag: node.clean_round_sandboxes(namespace, tag),
        ),
    )
    assert result.watch_relisted >= 1
    assert result.watch_restarts >= 1
    assert result.accepted, result.reason
    assert len(result.summary.latencies_s) == 3


def test_namespace_not_owned_is_refused(cluster: Cluster, lab_profile: NodeProfile) -> None:
    name = f"abtest-t-foreign-{secrets.token_hex(3)}"
    cluster.core.create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type, unused-ignore]
    try:
        with pytest.raises(NamespaceNotOwned):
            ensure_namespace(cluster, name)
        with pytest.raises(NamespaceNotOwned):
            run_round(
                cluster,
                RoundSpec(node_name=lab_profile.node_name, namespace=name, size=1, run_id="t"),
            )
        with pytest.raises(NamespaceNotOwned):
            delete_pods(cluster, name, f"{MANAGED_BY_KEY}={MANAGED_BY}")
        with pytest.raises(NamespaceNotOwned):
            delete_namespace(cluster, name)
        assert count_pods(cluster, name, "") == 0  # nothing was created there
    finally:
        cluster.core.delete_namespace(name)


def test_batch_command_json(namespace: str, tmp_path: object) -> None:
    out = CliRunner().invoke(
        app,
        ["batch", "--profile", "lab", "--pods", "3", "--observe", "1", "--namespace", namespace,
         "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    keys = (
        "run_id", "pods", "accepted", "reason", "batch_ready_s", "p50_s", "p95_s", "p99_s",
        "submit_rate", "sandbox_failures", "restarts", "pod_latencies_s",
    )  # fmt: skip
    for key in keys:
        assert key in data, key
    assert data["pods"] == 3 and data["accepted"] is True and len(data["pod_latencies_s"]) == 3
    with Store() as store:  # ABTEST_DB is per test (conftest)
        assert store.run_row(data["run_id"])["status"] == "finished"
        assert len(store.pods_frame(data["run_id"])) == 3
