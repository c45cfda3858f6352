"""A node profile's ``transport:`` and its ``pod:`` section (issue 47, nodes without SSH).

``transport: ssh`` (the default) reaches the node over SSH; ``transport: pod`` through a
privileged pod pinned to the node, created in abtest's namespace for the run
(:mod:`abtest.node.pod_transport`). Every value here reaches a pod spec or a script written
to the node, so each is checked whole when the profile loads (one line, exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtest.config.full_match import whole
from abtest.config.k8s_names import namespace_problem
from abtest.config.numbers import Range
from abtest.config.yaml_checks import Fields

TRANSPORTS = ("ssh", "pod")
#: an image reference: registry/name:tag or @digest; nothing a shell or YAML would read as
#: syntax (the same rule the workload's image follows)
IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
PULL_POLICIES = ("IfNotPresent", "Always", "Never")
READY_TIMEOUT_S = Range(1, 3600, unit="s")
#: the dead-man timer: long enough for a kubelet restart and its verification, short enough
#: that a node left by a killed controller is not down for long
DEADMAN_S = Range(5, 3600, unit="s")


@dataclass(frozen=True)
class PodTarget:
    """How the node is reached with ``transport: pod``."""

    image: str
    #: abtest's namespace for the pod (created labelled as abtest's own; refused when it
    #: exists without that label); not the workload's, whose leftover pods a sweep counts
    namespace: str = "abtest-node"
    pull_policy: str = "IfNotPresent"
    #: how long the pod may take to be Running before the profile is refused
    ready_timeout_s: float = 60.0
    #: after a restart, how long the host-side timer waits for abtest to disarm it before it
    #: restores the journaled config and binary and restarts the kubelet itself (longer than
    #: the profile's health_timeout_s: by default 60 s longer)
    deadman_s: float = 180.0


def transport_of(top: Fields) -> str:
    value = top.text("transport", default="ssh")
    if value not in TRANSPORTS:
        raise top.error(
            "transport", f"unknown transport {value!r}", f"use one of: {', '.join(TRANSPORTS)}"
        )
    return value


def check_sections(top: Fields, transport: str) -> None:
    """``ssh:`` goes with ``transport: ssh`` and ``pod:`` with ``transport: pod``. An ``ssh:``
    section on a pod profile is refused rather than ignored: a reader of the profile would
    believe the node is reached (and trusted by host key) over SSH when it is not."""
    if transport == "pod":
        if "ssh" in top.data:
            raise top.error(
                "ssh",
                "given with transport: pod, which does not use SSH",
                "remove the ssh section, or set transport: ssh",
            )
        if "pod" not in top.data:
            raise top.error("pod", "transport: pod needs a pod section", "add pod: {image: ...}")
    elif "pod" in top.data:
        raise top.error(
            "pod", "given with transport: ssh", "set transport: pod, or remove the pod section"
        )
    elif "ssh" not in top.data:
        raise top.error("ssh", "missing required key", "add ssh: {host: ...}, or transport: pod")


def pod_target(pod: Fields, health_timeout_s: float) -> PodTarget:
    pod.only({"image", "namespace", "pull_policy", "ready_timeout_s", "deadman_s"})
    image = pod.text("image", required=True)
    if not image or not whole(IMAGE_RE, image) or len(image) > 512:
        raise pod.error(
            "image",
            f"invalid image reference {image[:80]!r}",
            "registry/name:tag or name@sha256:..., with no spaces or shell syntax",
        )
    namespace = pod.text("namespace", default="abtest-node")
    if problem := namespace_problem(namespace):
        raise pod.error("namespace", problem, "use a DNS-1123 label")
    policy = pod.text("pull_policy", default="IfNotPresent")
    if policy not in PULL_POLICIES:
        raise pod.error("pull_policy", f"unknown pull policy {policy!r}", "/".join(PULL_POLICIES))
    return PodTarget(
        image=image,
        namespace=namespace,
        pull_policy=policy,
        ready_timeout_s=pod.number("ready_timeout_s", default=60.0, rng=READY_TIMEOUT_S),
        deadman_s=pod.number("deadman_s", default=health_timeout_s + 60, rng=DEADMAN_S),
    )
