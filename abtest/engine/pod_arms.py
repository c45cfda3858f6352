"""Runtime arms: prove an arm's pods can and did run under its runtime.

Before an arm's first batch at a visit, its RuntimeClass must exist in the cluster and name a
handler the node's runtime has; otherwise the arm fails (:class:`ArmRuntimeUnavailable`, like
a config the kubelet refuses) and no pod of it is created. After each of its rounds, every
pod must carry the arm's ``spec.runtimeClassName`` and every sandbox of the round must have
run under that RuntimeClass's handler (read from the node, not from the API); a mismatch
rejects the round with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from abtest.config.playbook import NodeProfile
from abtest.errors import NodeError

#: at most this many pods are named in a round's rejection reason
SHOWN = 3


class ArmRuntimeUnavailable(NodeError):
    """An arm's runtime cannot run on this node: the arm fails before any of its batches."""


class Handlers(Protocol):
    def runtime_handlers(self) -> frozenset[str] | None: ...


@dataclass(frozen=True)
class RuntimeCheck:
    """What an arm's rounds must show: this runtimeClassName, sandboxes under this handler."""

    runtime_class: str
    handler: str


def check_arm_runtime(
    arm: str,
    runtime_class: str | None,
    *,
    handler_of: Callable[[str], str | None],
    node: Handlers,
    profile: NodeProfile,
) -> RuntimeCheck | None:
    """The check for an arm's rounds (None: the arm sets no runtime class). Raises
    :class:`ArmRuntimeUnavailable` with the reason when the arm cannot run here."""
    if runtime_class is None:
        return None
    where = f"arm {arm} on {profile.node_name}"
    missing = [
        key
        for key, command in (
            ("runtime_handlers", profile.runtime_handlers_command),
            ("sandbox_handlers", profile.sandbox_handlers_command),
        )
        if not command
    ]
    if missing:
        raise ArmRuntimeUnavailable(
            f"{where}: the node profile {profile.source} has no commands.{missing[0]}, so "
            f"nothing could prove the pods ran under RuntimeClass {runtime_class!r}; "
            "add it (see playbooks/nodes/kubeadm-systemd.yaml); no batch of this arm ran"
        )
    handler = handler_of(runtime_class)
    if handler is None:
        raise ArmRuntimeUnavailable(
            f"{where}: the cluster has no RuntimeClass {runtime_class!r} (kubectl get "
            "runtimeclass); create it or fix the catalog; no batch of this arm ran"
        )
    have = node.runtime_handlers() or frozenset()
    if handler not in have:
        raise ArmRuntimeUnavailable(
            f"{where}: RuntimeClass {runtime_class!r} names handler {handler!r}, which the "
            f"node's runtime does not have (it has: {', '.join(sorted(have)) or 'none'}); "
            "no batch of this arm ran"
        )
    return RuntimeCheck(runtime_class, handler)


def _name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))


def round_problem(
    check: RuntimeCheck, pods: Sequence[dict[str, Any]], handlers: dict[str, str]
) -> str | None:
    """Why a round did not run under ``check`` (None: every pod did). ``pods``: the round's
    pods from the API; ``handlers``: pod name -> its sandbox's handler, from the node."""
    wrong_class = [
        f"{_name(p)}: {(p.get('spec') or {}).get('runtimeClassName')!r}"
        for p in pods
        if (p.get("spec") or {}).get("runtimeClassName") != check.runtime_class
    ]
    wrong_handler = [
        f"{n}: {h or '(default)'!r}" for n, h in handlers.items() if h != check.handler
    ]
    # a pod that ran (Running) has a sandbox: not finding it is no proof of its runtime
    running = {_name(p) for p in pods if (p.get("status") or {}).get("phase") == "Running"}
    unseen = sorted(running - set(handlers))
    problems = []
    if wrong_class:
        problems.append(
            f"{len(wrong_class)} of {len(pods)} pods without runtimeClassName "
            f"{check.runtime_class!r} ({', '.join(wrong_class[:SHOWN])})"
        )
    if wrong_handler:
        problems.append(
            f"{len(wrong_handler)} sandboxes not under handler {check.handler!r} "
            f"({', '.join(sorted(wrong_handler)[:SHOWN])})"
        )
    if unseen:
        problems.append(
            f"{len(unseen)} running pods with no sandbox in the node's listing "
            f"({', '.join(unseen[:SHOWN])})"
        )
    if not problems:
        return None
    return "runtime check: " + "; ".join(problems)


def round_verifier(
    check: RuntimeCheck,
    *,
    pods: Callable[[str], list[dict[str, Any]]],
    handlers: Callable[[str], dict[str, str] | None],
) -> Callable[[str], str | None]:
    """The check run_round calls with a round's label value, before its pods are deleted."""

    def verify(round_tag: str) -> str | None:
        seen = handlers(round_tag)
        if seen is None:  # check_arm_runtime refused this already; kept for a changed profile
            return "runtime check: the node profile has no commands.sandbox_handlers"
        return round_problem(check, pods(round_tag), seen)

    return verify
