"""Stopped sandboxes as ``crictl pods --state notready -o json`` lists them, and a fake node
answering the listing and ``crictl rmp`` for the stopped-sandbox cleanup tests."""

from __future__ import annotations

import json
from typing import Any

from abtest.batch.template import pod_labels
from abtest.config.playbook import NodeProfile, SSHTarget
from abtest.node.connection import Result
from abtest.node.session import NAMESPACE_LABEL, NodeSession

LIST = "crictl pods --state notready -o json --label io.kubernetes.pod.namespace={namespace}"
REMOVE = "crictl rmp {ids}"


def sandbox(
    n: int,
    namespace: str,
    *,
    tool_label: bool = True,
    state: str = "SANDBOX_NOTREADY",
) -> dict[str, Any]:
    labels = {
        NAMESPACE_LABEL: namespace,
        "io.kubernetes.pod.name": f"p{n}",
        "io.kubernetes.pod.uid": f"uid-{n}",
    }
    if tool_label:
        labels.update(pod_labels("run1", "round1"))
    return {
        "id": f"{n:02x}" * 32,
        "metadata": {"name": f"p{n}", "uid": f"uid-{n}", "namespace": namespace, "attempt": 0},
        "state": state,
        "createdAt": "1764500000000000000",
        "labels": labels,
        "annotations": {},
        "runtimeHandler": "",
    }


def listing(*items: dict[str, Any]) -> str:
    return json.dumps({"items": list(items)}, indent=2)


class FakeSSH:
    """Answers the profile's commands: the listing prints ``listing``, rmp exits ``rmp_rc``."""

    def __init__(self, listing_out: str, rmp_rc: int = 0, rmp_err: str = "") -> None:
        self.listing_out = listing_out
        self.rmp_rc = rmp_rc
        self.rmp_err = rmp_err
        self.commands: list[str] = []

    def run_shell(self, command: str, *, sudo: bool, timeout: float) -> Result:
        self.commands.append(command)
        if command.startswith("crictl pods"):
            return Result(command, 0, self.listing_out, "")
        if command.startswith("crictl rmp"):
            return Result(command, self.rmp_rc, "", self.rmp_err)
        raise AssertionError(f"unexpected command {command!r}")

    def close(self) -> None:
        pass

    @property
    def removals(self) -> list[str]:
        return [c for c in self.commands if c.startswith("crictl rmp")]


def session(fake: FakeSSH, listing_cmd: str = LIST) -> NodeSession:
    profile = NodeProfile(
        name="fake",
        source="fake.yaml",
        node_name="n1",
        kubeconfig=None,
        ssh=SSHTarget("fake-node", 22, "ops", None, False, "/dev/null", None),
        sudo=True,
        kubelet_config_path="/var/lib/kubelet/config.yaml",
        kubelet_binary_path="/usr/bin/kubelet",
        restart_command="true",
        healthz_url="http://127.0.0.1:10248/healthz",
        log_command=None,
        sandbox_count_command="crictl pods -q",
        image_present_command="crictl inspecti -q {image}",
        lock_path="/tmp/x.lock",
        health_timeout_s=10,
        stopped_sandboxes_command=listing_cmd,
        sandbox_remove_command=REMOVE,
    )
    s = NodeSession.__new__(NodeSession)
    s.profile = profile
    s.ssh = fake  # type: ignore[assignment]
    return s
