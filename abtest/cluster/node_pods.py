"""abtest's node-access pods (``transport: pod``): a privileged pod pinned to one node, and
commands run in it through the API server's exec stream.

The pod is abtest's own: labelled ``app.kubernetes.io/managed-by=abtest`` and
``abtest/role=node-access``, in a namespace abtest owns, and only such a pod is ever deleted.
Its controller (host, pid and the pid's start time) is written in annotations, so a pod left
by a killed controller is recognised and deleted by the next one.

The exec stream (:func:`exec_in_pod`) is the websocket v5 channel protocol through the
kubernetes client: stdin is streamed in chunks and closed (v5's close signal), stdout and
stderr are drained as bytes after every frame (a file of 100 MB is never one growing string),
and the exit status comes from the error channel. The kubernetes client swaps the
``ApiClient.request`` of the client it is given for the duration of a ``stream()`` call, so
execs go through a client used for nothing else, one connection attempt at a time.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL, STDIN_CHANNEL
from websocket import WebSocketException

from abtest.cluster.client import REQUEST_TIMEOUT, Cluster, api_call
from abtest.cluster.labels import MANAGED_BY, MANAGED_BY_KEY
from abtest.errors import ClusterError

ROLE_KEY = "abtest/role"
ROLE = "node-access"
NODE_KEY = "abtest/node"
#: the controller that created the pod: ``host pid pid-start`` (see abtest.node.lock)
CONTROLLER_ANNOTATION = "abtest/controller"
STDIN_CHUNK = 1 << 20
#: where the pod's main process writes its host pid, in the pod's own filesystem
INIT_PID_FILE = "/tmp/abtest-init.pid"
_exec_lock = threading.Lock()


class ExecTimeout(ClusterError):
    """The command did not finish within its time limit."""


class ExecNotOpened(ClusterError):
    """The stream was refused before the command started (nothing ran): e.g. a kubelet that
    has just restarted and does not know the pod's container yet."""


class ExecCut(ClusterError):
    """The stream ended without an exit status (a kubelet restart cuts it)."""


@dataclass(frozen=True)
class PodSpec:
    name: str
    namespace: str
    node: str
    image: str
    pull_policy: str
    controller: str


def node_pod_body(spec: PodSpec) -> dict[str, Any]:
    """The pod: pinned by ``nodeName`` (no scheduler, so no taint or resource can keep it
    off), the host's PID, network and IPC namespaces, privileged, the host's root at
    ``/host``, every taint tolerated, and a command that only waits."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": {MANAGED_BY_KEY: MANAGED_BY, ROLE_KEY: ROLE, NODE_KEY: spec.node},
            "annotations": {CONTROLLER_ANNOTATION: spec.controller},
        },
        "spec": {
            "nodeName": spec.node,
            "hostPID": True,
            "hostNetwork": True,
            "hostIPC": True,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "node",
                    "image": spec.image,
                    "imagePullPolicy": spec.pull_policy,
                    # writes its host pid (hostPID) for abtest.node.pod_transport.ENTER,
                    # then only waits (sleep ignores SIGTERM; the grace period is 0 anyway)
                    "command": [
                        "sh",
                        "-c",
                        # $$$$: the kubelet reads $$ as an escaped $ (as it expands $(VAR))
                        f"echo $$$$ > {INIT_PID_FILE} && exec sleep 2147483647",
                    ],
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                }
            ],
            "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
        },
    }


def owned(pod: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_KEY) == MANAGED_BY and labels.get(ROLE_KEY) == ROLE


@api_call
def create_pod(cluster: Cluster, spec: PodSpec) -> None:
    cluster.core.create_namespaced_pod(
        spec.namespace, node_pod_body(spec), _request_timeout=REQUEST_TIMEOUT
    )


@api_call
def read_pod(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        resp = cluster.core.read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    try:
        data: dict[str, Any] = json.loads(resp.data)
    finally:
        resp.release_conn()
    return data


@api_call
def node_access_pods(cluster: Cluster, namespace: str, node: str) -> list[dict[str, Any]]:
    """abtest's node-access pods for ``node`` (labels checked again here, whatever matched)."""
    selector = f"{MANAGED_BY_KEY}={MANAGED_BY},{ROLE_KEY}={ROLE},{NODE_KEY}={node}"
    resp = cluster.core.list_namespaced_pod(
        namespace, label_selector=selector, _preload_content=False, _request_timeout=30
    )
    try:
        items = json.loads(resp.data).get("items") or []
    finally:
        resp.release_conn()
    return [p for p in items if owned(p)]


@api_call
def delete_pod(cluster: Cluster, namespace: str, name: str, wait_s: float = 30.0) -> None:
    """Delete one of abtest's node-access pods (any other is refused) and wait until it is
    gone, so no container of it runs on after the controller."""
    pod = read_pod(cluster, namespace, name)
    if pod is None:
        return
    if not owned(pod):
        raise ClusterError(f"pod {namespace}/{name} is not an abtest node-access pod; left alone")
    try:
        cluster.core.delete_namespaced_pod(
            name, namespace, grace_period_seconds=0, _request_timeout=REQUEST_TIMEOUT
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + wait_s
    while read_pod(cluster, namespace, name) is not None:
        if time.monotonic() > deadline:
            raise ClusterError(f"pod {namespace}/{name} is not gone {wait_s:g} s after its delete")
        time.sleep(0.25)


def pending_reason(pod: dict[str, Any]) -> str:
    """Why a pod is not Running yet, in the API's words (phase, conditions, waiting state)."""
    status = pod.get("status") or {}
    parts = [str(status.get("phase") or "no phase")]
    for cond in status.get("conditions") or ():
        if cond.get("status") != "True" and cond.get("message"):
            parts.append(f"{cond.get('type')}: {cond['message']}")
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            parts.append(f"{waiting['reason']}: {waiting.get('message') or ''}".strip(": "))
    return "; ".join(parts)


# --------------------------------------------------------------------------- exec


class _Discard:
    def write(self, _data: bytes) -> None:
        pass


@dataclass(frozen=True)
class ExecOutcome:
    rc: int
    stdout: bytes
    stderr: bytes


def exit_status(raw: bytes) -> int:
    """The exit status from the error channel's Status (``Success``: 0; a non-zero exit:
    its code). A Status that is neither (the runtime could not start the command) is a
    ClusterError with its message."""
    try:
        status = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        raise ClusterError(f"exec: unreadable status {raw[:200]!r}") from None
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or ():
            if cause.get("reason") == "ExitCode":
                try:
                    return int(cause.get("message"))
                except (TypeError, ValueError):
                    break
    raise ClusterError(f"exec failed: {status.get('message') or status}")


def open_exec(cluster: Cluster, namespace: str, pod: str, argv: list[str]) -> Any:
    """A connected exec stream (a kubernetes WSClient) running ``argv`` in the pod."""
    with _exec_lock:
        try:
            ws = stream(
                cluster.core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                command=argv,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                binary=True,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            raise ExecNotOpened(f"cannot open an exec stream to {namespace}/{pod}: {exc}") from exc
        except Exception as exc:  # the client's own failure reporting a refused handshake
            why = exc.__context__ or exc
            raise ExecNotOpened(f"cannot open an exec stream to {namespace}/{pod}: {why}") from exc
    # the client keeps a second copy of every byte read for read_all() (its capture_all,
    # which the API method will not pass on): we drain the channels ourselves
    ws._all = _Discard()
    return ws


def exec_in_pod(
    cluster: Cluster,
    namespace: str,
    pod: str,
    argv: list[str],
    *,
    stdin: bytes | None,
    timeout: float,
) -> ExecOutcome:
    """Run ``argv`` in the pod: stdin streamed then closed, stdout and stderr as bytes, the
    exit status from the error channel. ExecTimeout past ``timeout``; ExecCut when the stream
    closes with no status."""
    ws = open_exec(cluster, namespace, pod, argv)
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    cut = "the exec stream closed without an exit status"
    raw = b""
    try:
        _send_stdin(ws, stdin or b"", out, err, deadline)
        while ws.is_open():
            if time.monotonic() > deadline:
                raise ExecTimeout(f"timed out after {timeout:.0f} s")
            ws.update(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            _drain(ws, out, err)
    except (OSError, ValueError, WebSocketException) as exc:
        # the server closes the stream right after the status: what arrived decides
        cut = f"exec stream failed: {exc}"
    finally:
        with contextlib.suppress(Exception):
            _drain(ws, out, err)
            raw = ws.read_channel(ERROR_CHANNEL)
        ws.close()
    if not raw:
        raise ExecCut(cut)
    return ExecOutcome(exit_status(raw), bytes(out), bytes(err))


def _send_stdin(ws: Any, data: bytes, out: bytearray, err: bytearray, deadline: float) -> None:
    view = memoryview(data)
    try:
        for start in range(0, len(view), STDIN_CHUNK):
            if time.monotonic() > deadline:
                raise ExecTimeout("timed out sending stdin")
            ws.write_channel(STDIN_CHANNEL, bytes(view[start : start + STDIN_CHUNK]))
            ws.update(timeout=0)  # a command that answers while it reads is drained as it goes
            _drain(ws, out, err)
        ws.close_channel(STDIN_CHANNEL)  # EOF: v5 only (a v4 server gets none; see docs)
    except WebSocketException:
        # the command ended before it read all of its input (or the stream was cut): what
        # it printed and its status, if any, are read below
        return


def _drain(ws: Any, out: bytearray, err: bytearray) -> None:
    out += ws.read_stdout(timeout=0) or b""
    err += ws.read_stderr(timeout=0) or b""
