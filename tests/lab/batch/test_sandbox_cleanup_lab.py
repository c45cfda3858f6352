"""Sandbox cleanup on the real lab (issue 11 item 2): a decoy namespace whose name the tool's
namespace is a substring of keeps its stopped sandboxes through a real round.

Run under the lab lock: ``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -q -m lab
tests/lab/batch/test_sandbox_cleanup_lab.py``.

The decoy's pods carry the tool's own pod label and run to completion (restartPolicy Never),
so the kubelet stops their sandboxes but, the pods still existing, its container GC keeps
them: nothing but a wrong cleanup can make them disappear during the round. (Deleted pods'
sandboxes would be removed by the kubelet's own GC within about a minute, which would make
the check a race.) Afterwards the decoy namespace is deleted and its sandboxes are removed
by exact id, so the lab is left clean.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from abtest.batch.round import run_round
from abtest.batch.spec import RoundSpec
from abtest.batch.template import MANAGED_BY, MANAGED_BY_KEY, ROUND_LABEL
from abtest.cluster.client import Cluster, connect
from abtest.cluster.namespaces import delete_namespace, ensure_namespace
from abtest.config.playbook import Generator, NodeProfile, Workload
from abtest.node.session import NodeSession

pytestmark = pytest.mark.lab

DECOY = "abtest-decoy"
TOOL_NS = "abtest"  # a substring of the decoy's name: `crictl pods --namespace abtest` hits both
DECOY_PODS = 3
NAMESPACE_LABEL = "io.kubernetes.pod.namespace"  # the kubelet's label on every sandbox


def crictl(profile: NodeProfile) -> str:
    """The profile's crictl invocation (binary and endpoint), from its sandbox_count command."""
    prefix, _, _ = profile.sandbox_count_command.rpartition(" pods")
    assert prefix, profile.sandbox_count_command
    return prefix


def sandboxes_of(node: NodeSession, namespace: str) -> list[dict[str, Any]]:
    """Every sandbox (any state) whose namespace label is exactly ``namespace``."""
    label = shlex.quote(f"{NAMESPACE_LABEL}={namespace}")
    res = node.profile_command(f"{crictl(node.profile)} pods --label {label} -o json", timeout=30)
    res.check("listing sandboxes")
    items = json.loads(res.stdout or '{"items": []}').get("items") or []
    return [s for s in items if (s.get("labels") or {}).get(NAMESPACE_LABEL) == namespace]


def decoy_pod(name: str, node_name: str, image: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            # exactly the label the tool selects its own pods by
            labels={MANAGED_BY_KEY: MANAGED_BY, ROUND_LABEL: "decoy"},
        ),
        spec=client.V1PodSpec(
            node_name=node_name,
            restart_policy="Never",
            automount_service_account_token=False,
            termination_grace_period_seconds=0,
            containers=[
                client.V1Container(
                    name="c",
                    image=image,
                    image_pull_policy="IfNotPresent",
                    command=["true"],
                )
            ],
        ),
    )


def wait_for(what: str, check: Any, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(1.0)


@pytest.fixture()
def cluster(lab_profile: NodeProfile) -> Cluster:
    return connect(lab_profile.kubeconfig, pool_size=32)


@pytest.fixture()
def node(lab_profile: NodeProfile) -> Iterator[NodeSession]:
    with NodeSession(lab_profile) as session:
        yield session


@pytest.fixture()
def decoy(cluster: Cluster, node: NodeSession, lab_profile: NodeProfile) -> Iterator[list[str]]:
    """``abtest-decoy`` (not the tool's namespace) with DECOY_PODS completed pods labelled like
    the tool's; yields their stopped sandboxes' ids; afterwards deletes it all by exact id."""
    core = cluster.core
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=DECOY, labels={"purpose": "decoy"})),
        _request_timeout=30,
    )
    try:
        image = Workload().image
        for i in range(DECOY_PODS):
            pod = decoy_pod(f"decoy-{i}", lab_profile.node_name, image)

            def create(pod: client.V1Pod = pod) -> bool:
                try:
                    core.create_namespaced_pod(DECOY, pod, _request_timeout=30)
                except ApiException as exc:
                    # the namespace's default service account may not exist yet
                    if exc.status == 403 and "serviceaccount" in str(exc.body):
                        return False
                    raise
                return True

            wait_for("the decoy pod to be created", create, 60)

        def all_stopped() -> list[str]:
            phases = []
            for p in core.list_namespaced_pod(DECOY, _request_timeout=30).items:
                assert p.status is not None
                phases.append(p.status.phase)
            boxes = sandboxes_of(node, DECOY)
            stopped = [s["id"] for s in boxes if s.get("state") == "SANDBOX_NOTREADY"]
            done = phases.count("Succeeded") == DECOY_PODS and len(stopped) == DECOY_PODS
            return stopped if done else []

        yield wait_for("the decoy pods to complete and their sandboxes to stop", all_stopped)
    finally:
        try:
            core.delete_namespace(DECOY, grace_period_seconds=0, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 404:
                raise

        def gone() -> bool:
            try:
                core.read_namespace(DECOY, _request_timeout=30)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        wait_for(f"namespace {DECOY} to be deleted", gone)
        # remove what is left of the decoy, by exact id (the kubelet's GC may be faster)
        left = [s["id"] for s in sandboxes_of(node, DECOY)]
        if left:
            ids = " ".join(shlex.quote(i) for i in left)
            node.profile_command(f"{crictl(lab_profile)} rmp --force {ids}", timeout=60)
        assert sandboxes_of(node, DECOY) == [], "the decoy's sandboxes are still on the node"


def test_decoy_namespace_keeps_its_stopped_sandboxes_through_a_round(
    cluster: Cluster, node: NodeSession, decoy: list[str], lab_profile: NodeProfile
) -> None:
    created = ensure_namespace(cluster, TOOL_NS)
    try:
        result = run_round(
            cluster,
            RoundSpec(
                node_name=lab_profile.node_name,
                namespace=TOOL_NS,
                size=5,
                run_id="sandbox-cleanup-lab",
                generator=Generator(observe_s=1.0, timeout_s=120.0),
                sandbox_count=node.sandbox_count,
                reap_sandboxes=lambda: node.remove_stopped_sandboxes(TOOL_NS),
                cleanup_timeout_s=120.0,
                scrape_metrics=False,
            ),
        )
    finally:
        if created:
            delete_namespace(cluster, TOOL_NS)
    assert result.accepted, result.reason
    # the tool's own stopped sandboxes were removed (the count is back at its baseline) ...
    assert result.cleanup_ok, result.cleanup_note
    assert result.sandbox_after == result.sandbox_baseline
    assert not [s for s in sandboxes_of(node, TOOL_NS) if s.get("state") == "SANDBOX_NOTREADY"]
    # ... and every stopped sandbox of the decoy is still there
    still = {s["id"] for s in sandboxes_of(node, DECOY) if s.get("state") == "SANDBOX_NOTREADY"}
    assert still == set(decoy), f"decoy sandboxes removed: {sorted(set(decoy) - still)}"
