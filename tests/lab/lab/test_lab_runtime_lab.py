"""The lab's second runtime on the real lab (issue 13 part 2): a pod asking for the `crun`
RuntimeClass runs, and containerd really ran its sandbox with the crun handler; runc and
no RuntimeClass at all give runc; `lab status --json` lists both handlers on every node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from abtest.lab import layout, runtimes
from abtest.lab.layout import Node

pytestmark = pytest.mark.lab


def _core() -> client.CoreV1Api:
    # the kubernetes client leaves this one unannotated
    new_client: Callable[[str], client.ApiClient] = config.new_client_from_config
    return client.CoreV1Api(new_client(str(layout.Paths().kubeconfig)))


def _status() -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "lab", "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def test_status_lists_both_handlers_on_every_node_and_both_runtime_classes(
    lab_up: None,
) -> None:
    st = _status()
    nodes = st["nodes"]
    assert isinstance(nodes, list) and nodes
    for node in nodes:
        assert node["runtime_handlers_error"] is None, node
        assert {"runc", "crun"} <= set(node["runtime_handlers"]), node["name"]
    assert st["runtime_classes_error"] is None
    classes = st["runtime_classes"]
    assert isinstance(classes, dict)
    assert classes.get("runc") == "runc" and classes.get("crun") == "crun"


@pytest.fixture()
def namespace(lab_up: None) -> Iterator[str]:
    core = _core()
    ns = f"abtest-runtime-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        # The default service account appears asynchronously (controller-manager).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not core.list_namespaced_service_account(ns).items:
            time.sleep(0.5)
        yield ns
    finally:
        core.delete_namespace(ns)


def _pod(name: str, runtime_class: str | None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            runtime_class_name=runtime_class,
            node_name=layout.NODE_NAME,
            containers=[
                client.V1Container(
                    name="c",
                    image=layout.BUSYBOX_IMAGE,
                    command=["sleep", "3600"],
                    image_pull_policy="IfNotPresent",
                )
            ],
            automount_service_account_token=False,
            termination_grace_period_seconds=1,
        ),
    )


def _crictl(*args: str) -> str:
    proc = subprocess.run(
        [*runtimes.crictl_base(Node(1)), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# The runc shim's default root for containerd's k8s.io namespace (the lab sets no Root).
SHIM_ROOT = "/run/containerd/runc/k8s.io"


def _oci_state(handler: str, oci_id: str) -> int:
    binary = {h.name: h.binary for h in runtimes.HANDLERS}[handler]
    proc = subprocess.run(
        [binary, "--root", SHIM_ROOT, "state", oci_id], capture_output=True, text=True
    )
    return proc.returncode


def _lab_shims() -> dict[int, str]:
    """pid -> executable of every runc shim whose command line names node 1's socket."""
    sock = str(Node(1).containerd_socket)
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            exe = os.readlink(entry / "exe")
        except OSError:
            continue
        if Path(argv[0]).name == "containerd-shim-runc-v2" and sock in argv:
            found[int(entry.name)] = exe
    return found


def test_each_pod_runs_under_its_runtime_class_handler(namespace: str) -> None:
    core = _core()
    want = {"on-crun": "crun", "on-runc": "runc", "no-class": None}
    for name, rc in want.items():
        core.create_namespaced_pod(namespace, _pod(name, rc))
    pending = set(want)
    deadline = time.monotonic() + 120
    pods: dict[str, client.V1Pod] = {}
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            p = core.read_namespaced_pod(name, namespace)
            assert p.status is not None
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []):
                pods[name] = p
                pending.discard(name)
        time.sleep(0.5)
    assert not pending, f"not Ready in 120 s: {sorted(pending)}"

    seen: dict[str, str] = {}
    for name in want:
        spec = pods[name].spec
        assert spec is not None
        assert spec.runtime_class_name == want[name]
        ids = _crictl(
            "pods", "-q", "--namespace", namespace, "--name", name, "--state", "ready"
        ).split()
        assert len(ids) == 1, (name, ids)
        inspect = json.loads(_crictl("inspectp", ids[0]))
        seen[name] = inspect["info"]["runtimeHandler"]
        assert inspect["status"]["state"] == "SANDBOX_READY"
        # Which OCI runtime really created the sandbox and the container: each keeps its
        # own state format in the shim's root, so only the creator can read its state.
        made_by = want[name] or runtimes.DEFAULT_HANDLER
        other = "runc" if made_by == "crun" else "crun"
        containers = _crictl("ps", "-q", "--pod", ids[0]).split()
        assert len(containers) == 1, (name, containers)
        for oci_id in (ids[0], *containers):
            assert _oci_state(made_by, oci_id) == 0, (name, made_by, oci_id)
            assert _oci_state(other, oci_id) != 0, (name, other, oci_id)
    # Every shim of the lab's containerd is its own build's (never Debian's 1.6 shim in
    # /usr/bin, which containerd 1.7 would run if it came first on containerd's PATH).
    shims = _lab_shims()
    assert shims, "no containerd-shim-runc-v2 serves the lab's containerd"
    assert set(shims.values()) == {str(layout.Paths().bin / "containerd-shim-runc-v2")}, shims
    # A pod without a RuntimeClass gets containerd's default: runc, as before crun came.
    assert seen == {"on-crun": "crun", "on-runc": "runc", "no-class": ""} or seen == {
        "on-crun": "crun",
        "on-runc": "runc",
        "no-class": "runc",
    }, seen


def test_a_pod_that_mounts_its_service_account_token_starts(namespace: str) -> None:
    """Most users' pods mount their token: a projected volume with the namespace's
    kube-root-ca.crt, which the controller manager's root CA publisher writes (without it the
    pod stayed ContainerCreating: "configmap kube-root-ca.crt not found")."""
    core = _core()
    pod = _pod("with-token", None)
    assert pod.spec is not None
    pod.spec.automount_service_account_token = True
    core.create_namespaced_pod(namespace, pod)
    deadline = time.monotonic() + 120
    ready = False
    while not ready and time.monotonic() < deadline:
        status = core.read_namespaced_pod("with-token", namespace).status
        assert status is not None
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        time.sleep(0.5)
    assert ready, "a token-mounting pod was not Ready in 120 s"
    spec = core.read_namespaced_pod("with-token", namespace).spec
    assert spec is not None and spec.volumes is not None
    assert any(v.projected is not None for v in spec.volumes)
    core.delete_namespaced_pod("with-token", namespace, grace_period_seconds=0)
