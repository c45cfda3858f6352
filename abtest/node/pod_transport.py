"""A node reached through a privileged pod (``transport: pod``): :class:`PodConnection`.

It is a :class:`abtest.node.connection.Connection` like the SSH one. On first use it creates
one pod pinned to the node (:mod:`abtest.cluster.node_pods`) in abtest's namespace, waits
until it runs, and runs every command through the exec API as
``nsenter -t 1 -m -u -i -n -p -- ARGV`` (:data:`ENTER`): in the host's namespaces, as root.
``sudo`` changes nothing (the command is root already), as ``sudo -n`` would leave a root
SSH user.
Files travel as the bytes of ``cat`` over the stream (stdin in 1 MiB frames for a write).

A pod that cannot run (no such node, an image that cannot be pulled, Pending past the
profile's ``pod.ready_timeout_s``) is one line (a UserError) before anything on the node is
touched, and the pod is deleted. The pod is deleted at :meth:`PodConnection.close`; one left by
a controller that was killed (its pid gone from this host) is deleted by the next one.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass

from abtest.cluster.client import Cluster, connect
from abtest.cluster.namespaces import ensure_namespace
from abtest.cluster.node_pods import (
    CONTROLLER_ANNOTATION,
    INIT_PID_FILE,
    ExecNotOpened,
    ExecOutcome,
    ExecTimeout,
    PodSpec,
    create_pod,
    delete_pod,
    exec_in_pod,
    node_access_pods,
    pending_reason,
    read_pod,
)
from abtest.cluster.nodes import node_names
from abtest.config.pod_transport import PodTarget
from abtest.errors import ClusterError, NodeError, UserError
from abtest.node.connection import DEFAULT_TIMEOUT_S, Commands, FileStat, Result
from abtest.node.lock import process_start
from abtest.process.closing import Closing

#: The namespaces commands run in: PID 1's (the host's mounts, names, IPC, network and
#: processes). Where PID 1's cannot be entered (a sandbox that hides them: the lab's machine
#: refuses even root), the container runtime's: the pod's shim, the parent of the pod's own
#: main process (whose host pid it wrote at its start, ``INIT_PID_FILE`` in its own root).
#: The runtime is in the namespaces the kubelet and its pods live by, never the pod's own.
ENTER = (
    "t=1\n"
    "if ! readlink /proc/1/ns/mnt >/dev/null 2>&1; then\n"
    f"  t=$(awk '/^PPid:/ {{print $2}}' \"/proc/$(cat {INIT_PID_FILE})/status\")\n"
    "fi\n"
    'exec nsenter -t "$t" -m -u -i -n -p -- "$@"\n'
)
NSENTER = ["sh", "-c", ENTER, "abtest-enter"]
_POLL_S = 0.5
#: how long an exec the kubelet refused before it started is tried again
OPEN_RETRY_S = 20.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodEndpoint:
    node: str
    namespace: str
    pod: str

    @property
    def alias(self) -> str:
        return self.node

    def describe(self) -> str:
        return f"pod {self.namespace}/{self.pod or '(not created)'} on node {self.node}"


def controller_id() -> str:
    """This controller as the pod's annotation names it: ``host pid pid-start``."""
    pid = os.getpid()
    return f"{socket.gethostname()} {pid} {process_start(pid) or '?'}"


def controller_gone(annotation: str) -> bool:
    """True when the annotation names a controller on this host that no longer runs."""
    parts = annotation.split()
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if parts[2] == "?":
        return not os.path.exists(f"/proc/{pid}")
    return process_start(pid) != parts[2]


class PodConnection(Commands, Closing):
    """A lazy connection to a node through a privileged pod (created on first use)."""

    def __init__(
        self,
        node: str,
        target: PodTarget,
        *,
        kubeconfig: str | None,
        context: str | None,
        source: str,
        cluster: Cluster | None = None,
    ) -> None:
        self.node = node
        self.target = target
        self.source = source
        # the exec stream swaps its client's request method while it connects: a client of
        # its own, never one another thread uses for plain calls
        self._cluster = cluster
        self._kube = (kubeconfig, context)
        self._pod = ""
        self._alive = False
        self._opening = threading.Lock()

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = connect(self._kube[0], pool_size=4, context=self._kube[1])
        return self._cluster

    @property
    def endpoint(self) -> PodEndpoint:
        return PodEndpoint(self.node, self.target.namespace, self._pod)

    @property
    def connected(self) -> bool:
        return self._alive

    # --- the pod ----------------------------------------------------------------------

    def open(self) -> str:
        """The running pod's name; creates it (and deletes stale ones) on first use."""
        with self._opening:  # commands run at once on first use make one pod, not several
            return self._pod or self._create()

    def _create(self) -> str:
        try:
            self._check_node()
            ensure_namespace(self.cluster, self.target.namespace)
            self.delete_stale()
            name = f"abtest-node-{self.node[:40].strip('.-')}-{secrets.token_hex(3)}"
            create_pod(self.cluster, self._spec(name))
        except ClusterError as exc:
            if "privileged" in str(exc) or "PodSecurity" in str(exc) or "forbidden" in str(exc):
                raise UserError(
                    f"the cluster refused the privileged node-access pod for node {self.node}: "
                    f"{str(exc)[:300]}",
                    f"{self.source}: transport",
                    "allow privileged pods (kube-apiserver --allow-privileged=true; the "
                    f"namespace {self.target.namespace} labelled "
                    "pod-security.kubernetes.io/enforce=privileged), or use transport: ssh",
                ) from None
            raise NodeError(f"{self.endpoint.describe()}: cannot create the pod ({exc})") from None
        self._pod = name
        try:
            self._wait_running()
        except BaseException:
            self.close()
            raise
        self._alive = True
        return self._pod

    def _spec(self, name: str) -> PodSpec:
        return PodSpec(
            name=name,
            namespace=self.target.namespace,
            node=self.node,
            image=self.target.image,
            pull_policy=self.target.pull_policy,
            controller=controller_id(),
        )

    def _check_node(self) -> None:
        if self.node not in node_names(self.cluster):
            raise UserError(
                f"node {self.node} does not exist in the cluster: no pod can run on it",
                f"{self.source}: node_name",
                "the node's name as `kubectl get nodes` shows it",
            )

    def _wait_running(self) -> None:
        deadline = time.monotonic() + self.target.ready_timeout_s
        reason = "not read yet"
        while time.monotonic() < deadline:
            try:
                pod = read_pod(self.cluster, self.target.namespace, self._pod)
            except ClusterError as exc:
                reason = str(exc)
                pod = None
            phase = ((pod or {}).get("status") or {}).get("phase")
            if phase == "Running":
                return
            if pod is not None:
                reason = pending_reason(pod)
            if phase in ("Failed", "Succeeded"):
                break
            time.sleep(_POLL_S)
        raise UserError(
            f"the node-access pod {self.target.namespace}/{self._pod} on node {self.node} did "
            f"not run within {self.target.ready_timeout_s:g} s ({reason}); deleted, nothing "
            "on the node was touched",
            f"{self.source}: pod",
            "check pod.image is on the node or pullable, that privileged pods are allowed in "
            "the namespace, or raise pod.ready_timeout_s",
        )

    def delete_stale(self) -> list[str]:
        """Delete this node's node-access pods whose controller on this host is gone."""
        gone = []
        for pod in node_access_pods(self.cluster, self.target.namespace, self.node):
            meta = pod.get("metadata") or {}
            if controller_gone((meta.get("annotations") or {}).get(CONTROLLER_ANNOTATION, "")):
                delete_pod(self.cluster, self.target.namespace, str(meta.get("name")))
                gone.append(str(meta.get("name")))
        return gone

    def close(self) -> None:
        """Delete the pod (it never outlives the controller that made it)."""
        self._alive = False
        name, self._pod = self._pod, ""
        if name:
            try:
                delete_pod(self.cluster, self.target.namespace, name)
            except ClusterError as exc:
                # never raised: close runs on every exit path, after the node's restore,
                # and must not hide why the run ended
                log.warning(
                    "could not delete the node-access pod %s/%s: %s; the next abtest run on "
                    "node %s deletes it",
                    self.target.namespace,
                    name,
                    exc,
                    self.node,
                )

    def reconnect(self) -> None:
        """Each command has its own stream: nothing to drop (the pod stays)."""

    # --- commands ---------------------------------------------------------------------

    def execute(
        self, argv: list[str], shown: str, *, sudo: bool, timeout: float, stdin: bytes | None
    ) -> Result:
        """One program on the host, as root (so ``sudo`` changes nothing)."""
        pod = self.open()
        try:
            out = self._exec_retrying(pod, [*NSENTER, *argv], stdin, timeout)
        except ExecTimeout:
            raise NodeError(
                f"pod {self.node}: command timed out after {timeout:.0f} s: {_short(shown)}"
            ) from None
        except ClusterError as exc:
            raise NodeError(f"pod {self.node}: {_short(shown)}: {exc}") from None
        return Result(
            command=shown,
            rc=out.rc,
            stdout=out.stdout.decode("utf-8", errors="replace"),
            stderr=out.stderr.decode("utf-8", errors="replace"),
            stdout_bytes=out.stdout,
        )

    def _exec_retrying(
        self, pod: str, argv: list[str], stdin: bytes | None, timeout: float
    ) -> ExecOutcome:
        """One exec; a stream refused before the command started (nothing ran) is tried
        again for a while: a kubelet just restarted takes seconds to know the pod again."""
        deadline = time.monotonic() + min(timeout, OPEN_RETRY_S)
        while True:
            try:
                return exec_in_pod(
                    self.cluster, self.target.namespace, pod, argv, stdin=stdin, timeout=timeout
                )
            except ExecNotOpened:
                if time.monotonic() > deadline:
                    raise
                time.sleep(_POLL_S)

    # --- files ------------------------------------------------------------------------

    def read_bytes(self, path: str, *, sudo: bool = False) -> bytes:
        res = self.run(["cat", "--", path], timeout=300)
        if not res.ok:
            if "No such file" in res.stderr or "can't open" in res.stderr:
                raise NodeError(f"{self.node}:{path}: no such file")
            raise NodeError(f"{self.node}:{path}: cannot read ({res.stderr.strip()[-300:]})")
        return res.stdout_bytes

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Create/truncate ``path`` with ``data`` (umask 077 until the chmod)."""
        script = 'umask 077; cat > "$1" && chmod "$2" "$1"'
        res = self.run(
            ["sh", "-c", script, "sh", path, f"{mode & 0o7777:o}"],
            stdin=data,
            timeout=max(DEFAULT_TIMEOUT_S, 60 + len(data) / 1e6),
        )
        if not res.ok:
            raise NodeError(f"{self.node}:{path}: cannot write ({res.stderr.strip()[-300:]})")

    def stat(self, path: str) -> FileStat | None:
        res = self.run(["stat", "-L", "-c", "%s %a %u %g", "--", path], timeout=20)
        if not res.ok:
            if "No such file" in res.stderr or "can't stat" in res.stderr:
                return None
            raise NodeError(f"{self.node}:{path}: cannot stat ({res.stderr.strip()[-300:]})")
        try:
            size, mode, uid, gid = res.stdout.split()
            return FileStat(int(size), int(mode, 8), int(uid), int(gid))
        except ValueError:
            raise NodeError(f"{self.node}:{path}: unexpected stat output {res.stdout!r}") from None


def _short(command: str, limit: int = 160) -> str:
    return command if len(command) <= limit else command[: limit - 3] + "..."
