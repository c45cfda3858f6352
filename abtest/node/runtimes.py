"""The node's container runtime handlers, and which handler each sandbox of a round ran under.

Both come from the profile's own commands (``commands.runtime_handlers``: ``crictl info``'s
JSON; ``commands.sandbox_handlers``: ``crictl pods -o json`` of one round). The listing is only
a pre-filter, exactly as for the sandbox cleanup: each sandbox's labels are checked here
(exact namespace label, the tool's pod label, the round's own label) before it counts.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Protocol

from abtest.cluster.labels import MANAGED_BY, MANAGED_BY_KEY, ROUND_LABEL
from abtest.config.full_match import whole
from abtest.config.playbook import NodeProfile
from abtest.errors import NodeError, UserError
from abtest.node.connection import Result


class ProfileCommands(Protocol):
    """What the readers below need of a :class:`abtest.node.session.NodeSession` (which calls
    them): its profile and a way to run the profile's commands."""

    profile: NodeProfile

    def profile_command(self, command: str, *, timeout: float = ...) -> Result: ...


NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_ROUND_TAG = re.compile(r"[a-z0-9]{1,63}")
INFO_EXAMPLE = "crictl info -o json"
PODS_EXAMPLE = (
    "crictl pods -o json --label io.kubernetes.pod.namespace={namespace} "
    "--label abtest/round={round}"
)


def _json(output: str, *, where: str, what: str, example: str) -> Any:
    try:
        return json.loads(output)
    except json.JSONDecodeError:
        raise UserError(
            f"the {what} command did not print JSON (starts {output.strip()[:80]!r})",
            where,
            f"use `{example}`",
        ) from None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_runtime_handlers(output: str, *, where: str) -> frozenset[str]:
    """The runtime handler names in ``crictl info`` JSON: containerd's configured runtimes
    (``config.containerd.runtimes``), and the CRI status list (``runtimeHandlers``) where the
    runtime reports one."""
    data = _json(output, where=where, what="runtime-handler", example=INFO_EXAMPLE)
    names: set[str] = set()
    if isinstance(data, dict):
        config = data.get("config")
        containerd = config.get("containerd") if isinstance(config, dict) else None
        runtimes = containerd.get("runtimes") if isinstance(containerd, dict) else None
        if isinstance(runtimes, dict):
            names.update(str(k) for k in runtimes)
        status = _mapping(data.get("status"))
        for listing in (data.get("runtimeHandlers"), status.get("runtimeHandlers")):
            for item in listing if isinstance(listing, list) else []:
                if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
                    names.add(item["name"])
    if not names:
        raise UserError(
            "the runtime-handler listing names no handler (no config.containerd.runtimes "
            "and no runtimeHandlers)",
            where,
            f"use `{INFO_EXAMPLE}` against the node's CRI socket",
        )
    return frozenset(names)


def select_round_handlers(
    output: str, namespace: str, round_tag: str, *, where: str
) -> dict[str, str]:
    """Pod name -> runtime handler of its sandbox, for exactly one round of the tool's pods
    (exact namespace label and metadata, the tool's label, the round's label). A pod with
    several sandboxes (a sandbox re-created) maps to every handler seen, joined by commas."""
    data = _json(output, where=where, what="sandbox-handler", example=PODS_EXAMPLE)
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UserError(
            "the sandbox-handler listing is JSON without an `items` list",
            where,
            f"use `{PODS_EXAMPLE}`",
        )
    seen: dict[str, set[str]] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        labels = _mapping(item.get("labels"))
        meta = _mapping(item.get("metadata"))
        ours = (
            labels.get(NAMESPACE_LABEL) == namespace
            and meta.get("namespace", namespace) == namespace
            and labels.get(MANAGED_BY_KEY) == MANAGED_BY
            and labels.get(ROUND_LABEL) == round_tag
        )
        if not ours:
            continue
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise NodeError(f"a sandbox of round {round_tag} has no pod name ({where})")
        # CRI leaves the field empty for the runtime's default handler
        handler = item.get("runtimeHandler")
        seen.setdefault(name, set()).add(handler if isinstance(handler, str) else "")
    return {name: ",".join(sorted(h)) for name, h in seen.items()}


def read_runtime_handlers(node: ProfileCommands) -> frozenset[str] | None:
    """The node runtime's handler names; None when the profile has no such command."""
    command = node.profile.runtime_handlers_command
    if not command:
        return None
    res = node.profile_command(command, timeout=30)
    res.check(f"listing the runtime handlers ({command!r})")
    where = f"{node.profile.source}: commands.runtime_handlers"
    return parse_runtime_handlers(res.stdout, where=where)


def read_round_handlers(
    node: ProfileCommands, namespace: str, round_tag: str
) -> dict[str, str] | None:
    """Pod name -> runtime handler of its sandbox for one round; None when the profile has no
    sandbox_handlers command."""
    command = node.profile.sandbox_handlers_command
    if not command:
        return None
    if not whole(_NAMESPACE, namespace) or not whole(_ROUND_TAG, round_tag):
        raise NodeError(f"invalid namespace {namespace!r} or round tag {round_tag!r}")
    filled = command.replace("{namespace}", shlex.quote(namespace)).replace(
        "{round}", shlex.quote(round_tag)
    )
    res = node.profile_command(filled, timeout=30)
    res.check(f"listing the sandboxes of round {round_tag} ({command!r})")
    where = f"{node.profile.source}: commands.sandbox_handlers"
    return select_round_handlers(res.stdout, namespace, round_tag, where=where)
