"""Fast cleanup on the real lab (issue 15 part 2): after a round whose cleanup stopped the round's
own sandboxes itself (``crictl stopp``, then ``rmp``), no sandbox of that round is left, the
node's sandbox count is back at its pre-round value, and two running decoys keep their running
sandboxes: a pod in another namespace without the tool's labels, and a pod in the tool's own
namespace carrying the tool's label but another round's.

Run under the lab lock: ``flock /tmp/abtest-lab.lock .venv/bin/python -m pytest -q -m lab
tests/lab/batch/test_cleanup_fast_lab.py``.

Afterwards the decoys are deleted and their sandboxes removed by exact id, so the lab is left
as it was found.
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
from abtest.node.connection import Result
from abtest.node.session import NodeSession

pytestmark = pytest.mark.lab

TOOL_NS = "abtest-fast"
OTHER_NS = "abtest-fast-decoy"  # not the tool's: created here without the tool's label
DECOY_ROUND = "d0d0d0d0d0"
NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
READY = "SANDBOX_READY"
SIZE = 8


def crictl(profile: NodeProfile) -> str:
    prefix, _, _ = profile.sandbox_count_command.rpartition(" pods")
    assert prefix, profile.sandbox_count_command
    return prefix


def sandboxes(node: NodeSession, label: str) -> list[dict[str, Any]]:
    """Every sandbox (any state) carrying ``label`` (key=value)."""
    cmd = f"{crictl(node.profile)} pods --label {shlex.quote(label)} -o json"
    res = node.profile_command(cmd, timeout=30)
    res.check("listing sandboxes")
    items = json.loads(res.stdout or '{"items": []}').get("items") or []
    key, _, value = label.partition("=")
    return [s for s in items if (s.get("labels") or {}).get(key) == value]


def running_pod(name: str, node_name: str, labels: dict[str, str]) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            node_name=node_name,
            automount_service_account_token=False,
            termination_grace_period_seconds=0,
            containers=[
                client.V1Container(
                    name="c",
                    image=Workload().image,
                    image_pull_policy="IfNotPresent",
                    command=["sleep", "3600"],
                    resources=client.V1ResourceRequirements(requests={"cpu": "10m"}),
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
        time.sleep(0.5)


def create(core: Any, namespace: str, pod: client.V1Pod) -> None:
    def attempt() -> bool:
        try:
            core.create_namespaced_pod(namespace, pod, _request_timeout=30)
        except ApiException as exc:
            # a new namespace's default service account may not exist yet
            if exc.status == 403 and "serviceaccount" in str(exc.body):
                return False
            raise
        return True

    assert pod.metadata is not None
    wait_for(f"pod {namespace}/{pod.metadata.name} to be created", attempt, 60)


@pytest.fixture()
def cluster(lab_profile: NodeProfile) -> Cluster:
    return connect(lab_profile.kubeconfig, pool_size=32)


@pytest.fixture()
def node(lab_profile: NodeProfile) -> Iterator[NodeSession]:
    with NodeSession(lab_profile) as session:
        yield session


@pytest.fixture()
def decoys(
    cluster: Cluster, node: NodeSession, lab_profile: NodeProfile
) -> Iterator[dict[str, str]]:
    """Two running decoy pods; yields {which: its running sandbox id}; afterwards deletes them
    and removes their sandboxes by exact id."""
    core = cluster.core
    ensure_namespace(cluster, TOOL_NS)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=OTHER_NS)), _request_timeout=30
    )
    ids: dict[str, str] = {}
    try:
        create(core, OTHER_NS, running_pod("other", lab_profile.node_name, {"purpose": "decoy"}))
        tool_labels = {MANAGED_BY_KEY: MANAGED_BY, ROUND_LABEL: DECOY_ROUND}
        create(core, TOOL_NS, running_pod("other-round", lab_profile.node_name, tool_labels))

        def running() -> dict[str, str]:
            found = {
                "other-namespace": sandboxes(node, f"{NAMESPACE_LABEL}={OTHER_NS}"),
                "other-round": sandboxes(node, f"{ROUND_LABEL}={DECOY_ROUND}"),
            }
            ready = {k: [s["id"] for s in v if s.get("state") == READY] for k, v in found.items()}
            return {k: v[0] for k, v in ready.items() if len(v) == 1} if all(ready.values()) else {}

        ids.update(wait_for("both decoys' sandboxes to run", running))
        yield ids
    finally:
        try:
            core.delete_namespace(OTHER_NS, grace_period_seconds=0, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 404:
                raise
        delete_namespace(cluster, TOOL_NS)

        def gone() -> bool:
            try:
                core.read_namespace(OTHER_NS, _request_timeout=30)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        wait_for(f"namespace {OTHER_NS} to be deleted", gone)
        left = [
            s["id"]
            for label in (f"{NAMESPACE_LABEL}={OTHER_NS}", f"{ROUND_LABEL}={DECOY_ROUND}")
            for s in sandboxes(node, label)
        ]
        if left:
            quoted = " ".join(shlex.quote(i) for i in left)
            node.profile_command(f"{crictl(lab_profile)} rmp --force {quoted}", timeout=60)


def test_the_round_stops_only_its_own_sandboxes_and_the_node_is_clean(
    cluster: Cluster, node: NodeSession, decoys: dict[str, str], lab_profile: NodeProfile
) -> None:
    assert lab_profile.sandbox_stop_command and lab_profile.round_sandboxes_command
    commands: list[str] = []
    run_command = node.profile_command

    def recording(command: str, **kw: Any) -> Result:
        commands.append(command)
        return run_command(command, **kw)

    node.profile_command = recording  # type: ignore[method-assign]
    tags: list[str] = []

    def clean(tag: str) -> int:
        tags.append(tag)
        return node.clean_round_sandboxes(TOOL_NS, tag)

    result = run_round(
        cluster,
        RoundSpec(
            node_name=lab_profile.node_name,
            namespace=TOOL_NS,
            size=SIZE,
            run_id="cleanup-fast-lab",
            workload=Workload(cpu_request="10m"),
            generator=Generator(observe_s=1.0, timeout_s=120.0),
            sandbox_count=node.sandbox_count,
            clean_sandboxes=clean,
            cleanup_timeout_s=120.0,
            scrape_metrics=False,
        ),
    )
    node.profile_command = run_command  # type: ignore[method-assign]
    assert result.accepted, result.reason
    assert set(tags) == {result.round_tag}
    # the round's own sandboxes were stopped by abtest (a stop command naming only them) ...
    stops = [c for c in commands if " stopp " in f" {c} "]
    assert stops, "no sandbox was stopped by the cleanup"
    assert not any(i in c for c in commands for i in decoys.values())
    # ... and none is left; the count is back at the pre-round value
    assert result.cleanup_ok, result.cleanup_note
    assert result.sandbox_after == result.sandbox_baseline
    assert sandboxes(node, f"{ROUND_LABEL}={result.round_tag}") == []
    removed = {p.part: p.seconds for p in result.gap_parts}.get("sandboxes_removed")
    assert removed is not None and removed >= 1
    # the decoys still run, in the very same sandboxes
    still = {
        "other-namespace": sandboxes(node, f"{NAMESPACE_LABEL}={OTHER_NS}"),
        "other-round": sandboxes(node, f"{ROUND_LABEL}={DECOY_ROUND}"),
    }
    for which, sandbox_id in decoys.items():
        states = {s["id"]: s.get("state") for s in still[which]}
        assert states.get(sandbox_id) == READY, f"decoy {which} touched: {states}"
    print(
        f"\n{SIZE} pods: cleanup {result.cleanup_s:.2f} s "
        f"(API {result.cleanup_api_s:.2f} s), stop commands {len(stops)}"
    )
