"""Pod sandboxes as ``crictl pods -o json`` lists them, and a fake node answering crictl
(the listings, ``stopp``, ``rmp``) for the sandbox-cleanup tests (the stopped sandboxes of a
namespace, and one round's own sandboxes): what would run on the node is recorded."""

from __future__ import annotations

import json
import shlex
from typing import Any

from abtest.batch.template import pod_labels
from abtest.config.playbook import NodeProfile, SSHTarget
from abtest.node.connection import Result
from abtest.node.session import NAMESPACE_LABEL, READY_STATE, STOPPED_STATE, NodeSession

ROUND = "0a1b2c3d4e"
ROUND_LIST = (
    "crictl pods -o json --label io.kubernetes.pod.namespace={namespace} "
    "--label abtest/round={round}"
)
STOPPED_LIST = (
    "crictl pods --state notready -o json --label io.kubernetes.pod.namespace={namespace}"
)
STOP = "crictl stopp {ids}"
REMOVE = "crictl rmp {ids}"


def sandbox(
    n: int,
    namespace: str = "abtest",
    *,
    round_tag: str = ROUND,
    tool_label: bool = True,
    state: str = READY_STATE,
) -> dict[str, Any]:
    """Sandbox ``n`` (id ``sid(n)``, pod ``p<n>``); with ``tool_label``, the tool's pod of
    round ``round_tag``."""
    labels = {
        NAMESPACE_LABEL: namespace,
        "io.kubernetes.pod.name": f"p{n}",
        "io.kubernetes.pod.uid": f"uid-{n}",
    }
    if tool_label:
        labels.update(pod_labels("run1", round_tag))
    return {
        "id": sid(n),
        "metadata": {"name": f"p{n}", "uid": f"uid-{n}", "namespace": namespace, "attempt": 0},
        "state": state,
        "createdAt": "1764500000000000000",
        "labels": labels,
        "annotations": {},
        "runtimeHandler": "",
    }


def stopped_sandbox(
    n: int, namespace: str, *, tool_label: bool = True, state: str = STOPPED_STATE
) -> dict[str, Any]:
    """A stopped sandbox in ``namespace`` (what the stopped-sandbox cleanup looks for)."""
    return sandbox(n, namespace, tool_label=tool_label, state=state)


def sid(n: int) -> str:
    return f"{n:02x}" * 32


def listing(*items: dict[str, Any]) -> str:
    return json.dumps({"items": list(items)}, indent=2)


class FakeSSH:
    """Answers crictl: a listing prints ``out``; stopp and rmp exit with the given codes."""

    def __init__(
        self,
        out: str,
        *,
        stop: tuple[int, str] = (0, ""),
        rmp: tuple[int, str] = (0, ""),
    ) -> None:
        self.out = out
        self.stop = stop
        self.rmp = rmp
        self.commands: list[str] = []

    def run_shell(self, command: str, *, sudo: bool, timeout: float) -> Result:
        self.commands.append(command)
        if command.startswith("crictl pods"):
            return Result(command, 0, self.out, "")
        if command.startswith("crictl stopp"):
            return Result(command, self.stop[0], "", self.stop[1])
        if command.startswith("crictl rmp"):
            return Result(command, self.rmp[0], "", self.rmp[1])
        raise AssertionError(f"unexpected command {command!r}")

    def close(self) -> None:
        pass

    def ids_in(self, verb: str) -> list[list[str]]:
        """The ids of every ``crictl <verb>`` command run, one list per command."""
        prefix = f"crictl {verb} "
        return [shlex.split(c[len(prefix) :]) for c in self.commands if c.startswith(prefix)]

    @property
    def removals(self) -> list[str]:
        return [c for c in self.commands if c.startswith("crictl rmp")]


def session(
    fake: FakeSSH, stopped_listing: str = STOPPED_LIST, *, fast: bool = True
) -> NodeSession:
    """A session over ``fake`` whose profile lists stopped sandboxes with ``stopped_listing``
    and, when ``fast``, has the round's own listing and stop commands."""
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
        stopped_sandboxes_command=stopped_listing,
        sandbox_remove_command=REMOVE,
        round_sandboxes_command=ROUND_LIST if fast else None,
        sandbox_stop_command=STOP if fast else None,
    )
    s = NodeSession.__new__(NodeSession)
    s.profile = profile
    s.ssh = fake  # type: ignore[assignment]
    return s


DECOYS = (
    sandbox(10, "abtest-ci"),  # a look-alike namespace
    sandbox(11, "team-abtest"),
    sandbox(12, tool_label=False),  # our namespace, not the tool's pod
    sandbox(13, round_tag="ffffffffff"),  # the tool's pod of another round (e.g. another run)
    sandbox(14, round_tag="ffffffffff", state="SANDBOX_NOTREADY"),
)
