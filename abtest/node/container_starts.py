"""When the container runtime started each container of a round's pods (CRI ``started_at``).

The profile's ``commands.container_starts`` prints ``crictl inspect`` JSON of the containers
in the tool's namespace (one listing per round, taken after the observation while the pods
still exist). Each container's ``startedAt`` is the runtime's own record of its start, in
nanoseconds; joined by the pod UID label to the watcher's first sight of ContainersReady it
splits a pod's containers phase into the runtime's part and the status pipeline's part, on
any kubelet build (abtest.batch.collect does the join).

The listing is only a pre-filter: each container's namespace label is checked here, and the
join keeps only the UIDs the round's own watch saw.
"""

from __future__ import annotations

import json
import re
import shlex
from datetime import datetime
from typing import Any

from abtest.config.full_match import whole
from abtest.errors import NodeError, UserError
from abtest.node.runtimes import ProfileCommands

NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
EXAMPLE = (
    "ids=$(crictl ps -a -q --label io.kubernetes.pod.namespace={namespace}); "
    'if [ -n "$ids" ]; then crictl inspect -q $ids; else echo "[]"; fi'
)
# RFC 3339 with up to nanoseconds, as crictl prints CRI times (Go's RFC3339Nano)
_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})")
# crictl prints an unset CRI time (0, a container never started) as 1970 or year 1
_UNSET_BEFORE_NS = 946_684_800 * 10**9  # 2000-01-01


def parse_ns(stamp: str) -> int | None:
    """An RFC 3339 time with up to nanoseconds as unix nanoseconds (None when malformed or
    unset). Python's datetime keeps microseconds only, so the fraction is added here."""
    m = _STAMP.fullmatch(stamp.strip())
    if m is None:
        return None
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    seconds = int(datetime.fromisoformat(m.group(1) + zone).timestamp())
    fraction = (m.group(2) or "").ljust(9, "0")
    ns = seconds * 10**9 + int(fraction)
    return ns if ns >= _UNSET_BEFORE_NS else None


def _entries(output: str, where: str) -> list[dict[str, Any]]:
    """``crictl inspect`` prints one object for one container and a list for several."""
    try:
        data = json.loads(output) if output.strip() else []
    except json.JSONDecodeError:
        raise UserError(
            f"the container-start listing did not print JSON (starts {output.strip()[:80]!r})",
            where,
            f"use `{EXAMPLE}`",
        ) from None
    items = data if isinstance(data, list) else [data]
    out = []
    for item in items:
        status = item.get("status") if isinstance(item, dict) else None
        if isinstance(status, dict):
            out.append(status)
    return out


def select_container_starts(output: str, namespace: str, *, where: str) -> dict[str, int]:
    """Pod UID -> unix nanoseconds when the last of its containers first started: a pod is
    ContainersReady only once every container runs, and a container restarted later (a
    later attempt) does not move its first start. Containers of another namespace, without
    a pod UID or never started are left out."""
    first: dict[tuple[str, str], int] = {}
    for status in _entries(output, where):
        labels = status.get("labels")
        if not isinstance(labels, dict) or labels.get(NAMESPACE_LABEL) != namespace:
            continue
        uid = labels.get(POD_UID_LABEL)
        started = status.get("startedAt")
        if not isinstance(uid, str) or not uid or not isinstance(started, str):
            continue
        ns = parse_ns(started)
        if ns is None:
            continue
        key = (uid, str(labels.get(CONTAINER_NAME_LABEL, status.get("id", ""))))
        first[key] = min(ns, first.get(key, ns))
    last: dict[str, int] = {}
    for (uid, _), ns in first.items():
        last[uid] = max(ns, last.get(uid, ns))
    return last


def read_container_starts(node: ProfileCommands, namespace: str) -> dict[str, int] | None:
    """Pod UID -> the runtime's start of its last container (unix ns) for the namespace's
    containers; None when the profile has no container_starts command."""
    command = node.profile.container_starts_command
    if not command:
        return None
    if not whole(_NAMESPACE, namespace):
        raise NodeError(f"invalid namespace {namespace!r}")
    res = node.profile_command(command.replace("{namespace}", shlex.quote(namespace)), timeout=30)
    res.check(f"listing the container starts in {namespace} ({command!r})")
    where = f"{node.profile.source}: commands.container_starts"
    return select_container_starts(res.stdout, namespace, where=where)
