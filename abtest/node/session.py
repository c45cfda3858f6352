"""One session with a node (over SSH or through a pod: the profile's ``transport``), and the
small read-only questions other layers ask it.

``NodeSession(profile)`` is a context manager over one lazy connection. The batch
engine uses :meth:`sandbox_count`, :meth:`image_present` and :meth:`kubelet_log_tail`;
the node controller builds on :attr:`ssh` and :meth:`profile_command`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from abtest.cluster.labels import MANAGED_BY, MANAGED_BY_KEY, ROUND_LABEL
from abtest.config.full_match import whole
from abtest.config.playbook import NodeProfile
from abtest.errors import NodeError, UserError
from abtest.node import container_starts, runtimes
from abtest.node.connection import DEFAULT_TIMEOUT_S, Connection, Result
from abtest.node.file_digest import memo_for
from abtest.node.pod_transport import PodConnection
from abtest.node.ssh import Connection as SSHConnection
from abtest.process.closing import Closing

#: An image reference: registry/name:tag or @digest. Nothing a shell would read as syntax.
IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_MISSING_IMAGE = re.compile(r"no such image|not found|does not exist", re.IGNORECASE)
DEFAULT_LOG_LINES = 40
NAMESPACE_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SANDBOX_ID_RE = re.compile(r"[0-9a-f]{12,64}")
#: the label the kubelet puts on every sandbox: the pod's namespace, exactly
NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
STOPPED_STATE = "SANDBOX_NOTREADY"
READY_STATE = "SANDBOX_READY"
#: a round's label value (``secrets.token_hex``): nothing a shell would read as syntax
ROUND_TAG_RE = re.compile(r"[a-z0-9]{1,63}")
_JSON_LISTING = "crictl pods --state notready -o json"


def _sandbox_fields(item: Any) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    if not isinstance(item, dict):
        return "", "", {}, {}
    labels = item.get("labels")
    meta = item.get("metadata")
    return (
        str(item.get("id") or ""),
        str(item.get("state") or ""),
        labels if isinstance(labels, dict) else {},
        meta if isinstance(meta, dict) else {},
    )


def _listing_items(output: str, *, where: str, what: str) -> list[Any]:
    """The ``items`` of a ``crictl pods -o json`` listing (a UserError naming the profile's
    command when it printed something else)."""
    try:
        data = json.loads(output) if output.strip() else {"items": []}
    except json.JSONDecodeError:
        raise UserError(
            f"the {what} listing did not print JSON "
            f"(starts {output.strip()[:80]!r}); abtest checks each sandbox's labels itself",
            where,
            f"use `{_JSON_LISTING}` (optionally with --label filters), "
            "see playbooks/nodes/kubeadm-systemd.yaml",
        ) from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UserError(
            f"the {what} listing is JSON without an `items` list",
            where,
            f"use `{_JSON_LISTING}`",
        )
    return items


def _checked_id(sandbox: str, where: str) -> str:
    if not whole(SANDBOX_ID_RE, sandbox):
        raise NodeError(f"unexpected sandbox id {sandbox!r} in the listing ({where})")
    return sandbox


def _ours(labels: dict[str, Any], meta: dict[str, Any], namespace: str) -> bool:
    """Exactly ``namespace`` (the kubelet's label and the sandbox metadata agree) and the
    tool's pod label (the kubelet copies pod labels onto the sandbox)."""
    return (
        labels.get(NAMESPACE_LABEL) == namespace
        and meta.get("namespace", namespace) == namespace
        and labels.get(MANAGED_BY_KEY) == MANAGED_BY
    )


def select_stopped_sandboxes(output: str, namespace: str, *, where: str) -> list[str]:
    """The ids, from ``crictl pods -o json`` output, of the sandboxes that are stopped, in
    exactly ``namespace`` and carry the tool's pod label (the kubelet copies pod labels onto
    the sandbox). Everything else in the listing is left alone, whatever filter produced it."""
    ids = []
    for item in _listing_items(output, where=where, what="stopped-sandbox"):
        sandbox, state, labels, meta = _sandbox_fields(item)
        if state == STOPPED_STATE and _ours(labels, meta, namespace):
            ids.append(_checked_id(sandbox, where))
    return ids


@dataclass(frozen=True)
class RoundSandboxes:
    """One round's sandboxes on the node, by state (ids checked to be hex)."""

    ready: tuple[str, ...]
    stopped: tuple[str, ...]


def select_round_sandboxes(
    output: str, namespace: str, round_tag: str, *, where: str
) -> RoundSandboxes:
    """The sandboxes, from ``crictl pods -o json`` output, of exactly one round of the tool's
    pods: exact namespace, the tool's pod label and the round's own label value. Anything
    else in the listing (another namespace, another round, a pod the tool did not label) is
    left alone, whatever filter produced the listing."""
    ready: list[str] = []
    stopped: list[str] = []
    for item in _listing_items(output, where=where, what="round-sandbox"):
        sandbox, state, labels, meta = _sandbox_fields(item)
        if not (_ours(labels, meta, namespace) and labels.get(ROUND_LABEL) == round_tag):
            continue
        if state == READY_STATE:
            ready.append(_checked_id(sandbox, where))
        elif state == STOPPED_STATE:
            stopped.append(_checked_id(sandbox, where))
    return RoundSandboxes(tuple(ready), tuple(stopped))


# What `crictl rmp` says when the kubelet removed (or is removing) the same container or
# sandbox at the same moment (NotFound, containerd's "already in removing state"), or when
# the runtime was too busy to answer within crictl's RPC timeout (DeadlineExceeded, e.g. 150
# sandboxes at once on 2 cores): the sandbox is still listed at the next poll and removed then.
# A stop whose network teardown finds the pod's interface gone ("failed to delete \"eth0\": no
# such device", the bridge plugin) raced the kubelet's own stop of the same sandbox: the next
# poll lists it again and stops it again.
_REMOVAL_RACE = re.compile(
    r"not ?found|already in removing state|DeadlineExceeded|failed to delete \S+: no such device",
    re.IGNORECASE,
)
# crictl's own log lines that are not errors (e.g. which config file it read)
_NOT_AN_ERROR = re.compile(r"level=(warning|info|debug)")
_REMOVED = re.compile(r"^Removed sandbox ", re.MULTILINE)


# How many sandbox_stop commands run at once, each given its share of the ids: crictl stops
# the ids it is given one after another (0.2-0.8 s each on busy cores; 150 of them took 30 s),
# while the runtime stops different sandboxes in parallel (as the kubelet has it do). Each
# command is one SSH channel; OpenSSH allows 10 sessions per connection by default.
STOP_COMMANDS_AT_ONCE = 4


def split_ids(ids: Sequence[str], parts: int) -> list[tuple[str, ...]]:
    """``ids`` in at most ``parts`` non-empty shares of nearly equal size, in order."""
    n = max(1, min(parts, len(ids)))
    size, extra = divmod(len(ids), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(tuple(ids[start:end]))
        start = end
    return [chunk for chunk in out if chunk]


def only_removal_races(stderr: str) -> bool:
    """True when every error line of a failed removal's stderr is a race with the kubelet's
    own removal or a runtime timeout (and there is at least one): anything else is a real
    failure."""
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not _NOT_AN_ERROR.search(ln)]
    return bool(lines) and all(_REMOVAL_RACE.search(ln) for ln in lines)


def open_transport(
    profile: NodeProfile, *, accept_new_host_key: bool, connect_timeout: float
) -> Connection:
    """The profile's transport, not connected yet: SSH, or a pod pinned to the node."""
    if profile.pod is not None:
        return PodConnection(
            profile.node_name,
            profile.pod,
            kubeconfig=profile.kubeconfig,
            context=profile.kube_context,
            source=profile.source,
        )
    assert profile.ssh is not None  # a profile is reached by one of the two
    return SSHConnection(
        profile.ssh, accept_new_host_key=accept_new_host_key, connect_timeout=connect_timeout
    )


class NodeSession(Closing):
    """A node reached through its profile: ``with NodeSession(profile) as node: ...``.

    ``connection`` is what the session runs its commands over: an SSH connection to the
    profile's host when None (made lazily, connecting on first use), else the one given (a
    test's :class:`abtest.testing.FakeConnection`)."""

    def __init__(
        self,
        profile: NodeProfile,
        *,
        accept_new_host_key: bool = False,
        connect_timeout: float = 15.0,
        connection: Connection | None = None,
    ) -> None:
        self.profile = profile
        # the digests of the node's files this process hashed (abtest.node.file_digest)
        self.digests = memo_for(profile.node_name, profile.ssh)
        self.ssh: Connection = connection or open_transport(
            profile, accept_new_host_key=accept_new_host_key, connect_timeout=connect_timeout
        )

    def close(self) -> None:
        self.ssh.close()

    # --- running things ----------------------------------------------------------------

    def profile_command(self, command: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> Result:
        """Run one of the profile's own (trusted) commands, with sudo if the profile says."""
        return self.ssh.run_shell(command, sudo=self.profile.sudo, timeout=timeout)

    def run(self, argv: list[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> Result:
        """Run a program with quoted arguments, with sudo if the profile says."""
        return self.ssh.run(argv, sudo=self.profile.sudo, timeout=timeout)

    # --- the batch engine's questions ----------------------------------------------------

    def sandbox_count(self) -> int:
        """How many pod sandboxes the runtime has (non-empty lines of sandbox_count)."""
        res = self.profile_command(self.profile.sandbox_count_command, timeout=30)
        res.check(f"counting pod sandboxes ({self.profile.sandbox_count_command!r})")
        return sum(1 for line in res.stdout.splitlines() if line.strip())

    def remove_stopped_sandboxes(self, namespace: str) -> int:
        """Remove the stopped pod sandboxes of the tool's own pods in ``namespace`` instead of
        waiting up to a minute for the kubelet's container GC. Returns how many were removed;
        0 when the profile has no commands for it.

        The listing is only a pre-filter: each sandbox's labels are checked here (exact
        namespace label, the tool's pod label, state NOTREADY) before its id is passed on, so
        a filter that matches too much (``crictl pods --namespace`` is an unanchored regular
        expression) can never remove another namespace's sandbox. A failing remove command is
        a NodeError (the caller backs off and reports it)."""
        listing, remove = (
            self.profile.stopped_sandboxes_command,
            self.profile.sandbox_remove_command,
        )
        if not (listing and remove):
            return 0
        if not whole(NAMESPACE_RE, namespace):
            raise UserError(f"invalid namespace {namespace!r}", "cleanup")
        res = self.profile_command(
            listing.replace("{namespace}", shlex.quote(namespace)), timeout=30
        )
        res.check(f"listing stopped sandboxes ({listing!r})")
        ids = select_stopped_sandboxes(
            res.stdout, namespace, where=f"{self.profile.source}: commands.stopped_sandboxes"
        )
        return self._remove(remove, ids, f"stopped pod sandboxes of namespace {namespace}")

    def clean_round_sandboxes(self, namespace: str, round_tag: str) -> int:
        """Stop the sandboxes of one round's pods ourselves, then remove them; returns how
        many were removed. Call it only once the round's pods are gone from the API (a
        sandbox stopped under a pod the kubelet still runs is started again).

        Why: the kubelet gives every container at least 2 s after SIGTERM, and the reference
        workload (``sleep`` as PID 1) ignores SIGTERM, so every deleted pod waits out that
        grace before its sandbox stops. The runtime's StopPodSandbox kills the containers at
        once. Only sandboxes whose labels are checked here (exact namespace, the tool's pod
        label, this round's label) are stopped (``STOP_COMMANDS_AT_ONCE`` stop commands at
        once, each given its share of the ids) or removed, and nothing is removed in a pass
        whose stops did not all complete: removal waits until all of the round's listed
        sandboxes are stopped. Without the profile's ``round_sandboxes`` and
        ``sandbox_stop`` commands this is :meth:`remove_stopped_sandboxes` (the kubelet's
        own stop, then ours removes)."""
        listing, stop, remove = (
            self.profile.round_sandboxes_command,
            self.profile.sandbox_stop_command,
            self.profile.sandbox_remove_command,
        )
        if not (listing and stop and remove):
            return self.remove_stopped_sandboxes(namespace)
        if not whole(NAMESPACE_RE, namespace):
            raise UserError(f"invalid namespace {namespace!r}", "cleanup")
        if not whole(ROUND_TAG_RE, round_tag):
            raise NodeError(f"invalid round tag {round_tag!r}: not a label value abtest makes")
        command = listing.replace("{namespace}", shlex.quote(namespace)).replace(
            "{round}", shlex.quote(round_tag)
        )
        res = self.profile_command(command, timeout=30)
        res.check(f"listing the round's sandboxes ({listing!r})")
        found = select_round_sandboxes(
            res.stdout,
            namespace,
            round_tag,
            where=f"{self.profile.source}: commands.round_sandboxes",
        )
        if found.ready:
            results = self._run_at_once(
                [
                    stop.replace("{ids}", " ".join(shlex.quote(i) for i in chunk))
                    for chunk in split_ids(found.ready, STOP_COMMANDS_AT_ONCE)
                ],
                timeout=60,
            )
            failed = [res for res in results if not res.ok]
            if failed and all(only_removal_races(res.stderr) for res in failed):
                # the kubelet stopped or removed one at the same moment, or the runtime
                # was slow: some may still run, so nothing is removed in this pass; the
                # caller's next poll lists again
                return 0
            for res in failed:
                res.check(
                    f"stopping {len(found.ready)} pod sandboxes of round {round_tag} "
                    f"in namespace {namespace} ({stop!r})"
                )
        ids = [*found.ready, *found.stopped]
        return self._remove(remove, ids, f"pod sandboxes of round {round_tag} in {namespace}")

    def _run_at_once(self, commands: list[str], *, timeout: float) -> list[Result]:
        """Run the profile's commands at the same time, each on its own channel of the one
        SSH connection (already open: the listing before them opened it)."""
        if len(commands) == 1:
            return [self.profile_command(commands[0], timeout=timeout)]
        with ThreadPoolExecutor(len(commands), thread_name_prefix="abtest-node") as pool:
            return list(pool.map(lambda c: self.profile_command(c, timeout=timeout), commands))

    def _remove(self, template: str, ids: list[str], what: str) -> int:
        """Remove checked, stopped sandboxes by id; how many crictl removed."""
        if not ids:
            return 0
        command = template.replace("{ids}", " ".join(shlex.quote(i) for i in ids))
        res = self.profile_command(command, timeout=60)
        if not res.ok and only_removal_races(res.stderr):
            # the kubelet removes a deleted pod's containers itself, at the same moment: what
            # we were removing is gone or going. The caller counts the sandboxes again, so a
            # sandbox that is in fact still there is seen, never assumed gone; what crictl
            # reports removed is what is returned.
            return len(_REMOVED.findall(res.stdout))
        res.check(f"removing {len(ids)} {what} ({template!r})")
        return len(ids)

    def runtime_handlers(self) -> frozenset[str] | None:
        """The runtime's handler names (None: the profile has no runtime_handlers command)."""
        return runtimes.read_runtime_handlers(self)

    def round_handlers(self, namespace: str, round_tag: str) -> dict[str, str] | None:
        """Pod name -> the runtime handler its sandbox ran under, for one round's pods (None:
        the profile has no sandbox_handlers command)."""
        return runtimes.read_round_handlers(self, namespace, round_tag)

    def container_starts(self, namespace: str) -> dict[str, int] | None:
        """Pod UID -> the runtime's start of its last container (unix ns), for the
        namespace's containers (None: the profile has no container_starts command)."""
        return container_starts.read_container_starts(self, namespace)

    def image_present(self, image: str) -> bool:
        """Whether the runtime has ``image`` (by the profile's image_present command)."""
        if not whole(IMAGE_RE, image):
            raise UserError(f"invalid image reference {image!r}", "workload.image")
        template = self.profile.image_present_command
        command = (
            template.replace("{image}", shlex.quote(image))
            if "{image}" in template
            else f"{template} {shlex.quote(image)}"
        )
        res = self.profile_command(command, timeout=30)
        if res.ok:
            return bool(res.stdout.strip())
        if _MISSING_IMAGE.search(res.stderr + res.stdout):
            return False
        res.check(f"checking for image {image}")
        return False  # pragma: no cover - check() raised

    def kubelet_log_tail(self, n: int = DEFAULT_LOG_LINES) -> str:
        """The kubelet's last ``n`` log lines ("" if the profile has no log_command)."""
        template = self.profile.log_command
        if not template or n <= 0:
            return ""
        n = int(n)
        command = template.replace("{lines}", str(n))
        try:
            res = self.profile_command(command, timeout=30)
        except NodeError as exc:
            return f"(could not fetch the kubelet log: {exc})"
        if not res.ok:
            return f"(log command exited {res.rc}: {res.stderr.strip()[-300:]})"
        lines = res.stdout.splitlines()
        return "\n".join(lines[-n:])
