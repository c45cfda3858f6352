"""The lab's second runtime (issue 13 part 2), without a lab: the containerd config text
each node gets, the packages, the RuntimeClass objects `lab up` makes, and what `lab
status` reads from `crictl info`."""

from __future__ import annotations

import io
import json
import subprocess
import tomllib
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from abtest.errors import LabError
from abtest.lab import components, files, host, runtimes
from abtest.lab.layout import Node, Paths
from abtest.lab.nodes import NodeStatus
from abtest.lab.status import LabStatus

CRI = "io.containerd.grpc.v1.cri"


def _config(tmp_path: Path, index: int) -> dict[str, Any]:
    node = Node(index, Paths(root=tmp_path / "state", run=tmp_path / "run"))
    files.make_dir(node.containerd_dir)
    path = host.write_containerd_config(node)
    with path.open("rb") as fh:
        return tomllib.load(fh)


@pytest.mark.parametrize("index", [1, 2, 3])
def test_every_node_has_runc_as_default_and_crun_beside_it(tmp_path: Path, index: int) -> None:
    conf = _config(tmp_path, index)
    ctd = conf["plugins"][CRI]["containerd"]
    assert ctd["default_runtime_name"] == "runc"
    assert set(ctd["runtimes"]) == {"runc", "crun"}
    runc, crun = ctd["runtimes"]["runc"], ctd["runtimes"]["crun"]
    # runc's entry is what it was before crun came (the baseline arm is unchanged).
    assert runc == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": False}}
    # crun speaks runc's CLI, so the same shim drives it; cgroupfs like runc (cgroup v1 lab).
    assert crun == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": "/usr/bin/crun", "SystemdCgroup": False},
    }


def test_nodes_keep_their_own_socket_with_the_runtimes(tmp_path: Path) -> None:
    one, two = _config(tmp_path, 1), _config(tmp_path, 2)
    assert one["grpc"]["address"] != two["grpc"]["address"]
    assert one["plugins"][CRI]["containerd"] == two["plugins"][CRI]["containerd"]


def test_crun_is_a_package_the_lab_and_bootstrap_install() -> None:
    assert host.PACKAGES["crun"] == "/usr/bin/crun"
    bootstrap = (Path(__file__).parents[3] / "scripts" / "bootstrap").read_text()
    pkgs = bootstrap.split("PKGS=(", 1)[1].split(")", 1)[0].split()
    assert "crun" in pkgs and "runc" in pkgs
    # Every handler's binary comes from a package the lab checks for.
    for handler in runtimes.HANDLERS:
        assert handler.binary in host.PACKAGES.values(), handler


# --- what crictl info says ------------------------------------------------------------------

INFO_16 = {
    "config": {
        "containerd": {
            "defaultRuntimeName": "runc",
            "runtimes": {
                "runc": {"runtimeType": "io.containerd.runc.v2"},
                "crun": {"runtimeType": "io.containerd.runc.v2"},
            },
        }
    },
    "status": {"conditions": []},
}


def test_handlers_from_containerd_16_info() -> None:
    assert runtimes.handlers_from_info(INFO_16) == ("crun", "runc")


def test_handlers_from_a_runtime_that_reports_them_in_its_status() -> None:
    # CRI's StatusResponse.runtime_handlers (containerd 2.x): the empty name is the default.
    info = {
        "runtimeHandlers": [{"name": ""}, {"name": "runc"}, {"name": "crun"}],
        "config": {"containerd": {"runtimes": {"runc": {}}}},
    }
    assert runtimes.handlers_from_info(info) == ("crun", "runc")


def test_info_without_handlers_is_an_error_not_an_empty_list() -> None:
    with pytest.raises(LabError, match="no runtime handlers"):
        runtimes.handlers_from_info({"status": {}})


def test_node_handlers_reports_a_failing_crictl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(1, Paths(root=tmp_path / "state", run=tmp_path / "run"))

    class Proc:
        returncode = 1
        stdout = ""
        stderr = "connect: connection refused"

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Proc())
    handlers, error = runtimes.node_handlers(node)
    assert handlers == () and error is not None and "connection refused" in error


# --- RuntimeClass objects at `lab up` ---------------------------------------------------------


class FakeApi:
    """The API server's runtimeclasses collection, as components.api_get/api_call see it."""

    def __init__(self, objects: dict[str, str]) -> None:
        self.objects = dict(objects)
        self.calls: list[tuple[str, str]] = []

    def get(self, _paths: Paths, _ports: dict[str, int], path: str) -> dict[str, Any]:
        assert path == runtimes.RUNTIME_CLASS_PATH
        return {"items": [{"metadata": {"name": n}, "handler": h} for n, h in self.objects.items()]}

    def call(
        self,
        _paths: Paths,
        _ports: dict[str, int],
        path: str,
        method: str,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.calls.append((method, path))
        if method == "POST":
            assert body is not None and body["apiVersion"] == "node.k8s.io/v1"
            name = body["metadata"]["name"]
            if name in self.objects:
                raise urllib.error.HTTPError(path, 409, "Conflict", {}, io.BytesIO())  # type: ignore[arg-type]
            self.objects[name] = body["handler"]
            return body
        if method == "DELETE":
            self.objects.pop(path.rsplit("/", 1)[1])
            return {}
        raise AssertionError(method)


@pytest.fixture()
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi({})
    monkeypatch.setattr(components, "api_get", fake.get)
    monkeypatch.setattr(components, "api_call", fake.call)
    return fake


def test_lab_up_creates_both_runtime_classes(api: FakeApi) -> None:
    said: list[str] = []
    runtimes.ensure_runtime_classes(Paths(), {}, said.append)
    assert api.objects == {"runc": "runc", "crun": "crun"}
    assert any("crun" in line for line in said)


def test_a_second_up_changes_nothing(api: FakeApi) -> None:
    api.objects = {"runc": "runc", "crun": "crun", "kata": "kata"}
    runtimes.ensure_runtime_classes(Paths(), {}, lambda _l: None)
    assert api.calls == []
    assert api.objects["kata"] == "kata"  # not the lab's: left alone


def test_a_runtime_class_with_another_handler_is_replaced(api: FakeApi) -> None:
    # RuntimeClass.handler is immutable: an object naming another handler is recreated.
    api.objects = {"runc": "runc", "crun": "runc"}
    said: list[str] = []
    runtimes.ensure_runtime_classes(Paths(), {}, said.append)
    assert api.objects == {"runc": "runc", "crun": "crun"}
    assert ("DELETE", f"{runtimes.RUNTIME_CLASS_PATH}/crun") in api.calls
    assert any("runc -> crun" in line for line in said)


def test_runtime_classes_lists_name_and_handler(api: FakeApi) -> None:
    api.objects = {"runc": "runc", "crun": "crun"}
    assert runtimes.runtime_classes(Paths(), {}) == {"crun": "crun", "runc": "runc"}


# --- lab status --json -----------------------------------------------------------------------


def test_status_json_lists_each_nodes_handlers_and_the_runtime_classes() -> None:
    node = NodeStatus(
        "abtest-lab",
        1,
        "playbooks/nodes/lab.yaml",
        {n: 1 for n in components.NODE_COMPONENTS},
        {n: True for n in components.NODE_COMPONENTS},
        True,
        runtime_handlers=("crun", "runc"),
    )
    st = LabStatus(
        up=True,
        ready=True,
        node="abtest-lab",
        kubeconfig="k",
        ssh_target="s",
        components=(),
        nodes=(node,),
        runtime_classes={"crun": "crun", "runc": "runc"},
    )
    out = json.loads(json.dumps(st.as_json()))
    assert out["runtime_classes"] == {"crun": "crun", "runc": "runc"}
    assert out["runtime_classes_error"] is None
    assert out["nodes"][0]["runtime_handlers"] == ["crun", "runc"]
    assert out["nodes"][0]["runtime_handlers_error"] is None
