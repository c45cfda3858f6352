"""Each lab component's command line, byte for byte, as the lab started it before the
components became objects (tests/fixtures/lab/component_argv.json was written by that code):
a change to a flag shows here first, on purpose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from abtest.lab import components
from abtest.lab.layout import Node, Paths

PINNED = Path(__file__).resolve().parents[2] / "fixtures" / "lab" / "component_argv.json"
PORTS = {
    "etcd": 2379,
    "etcd_peer": 2380,
    "apiserver": 6443,
    "controller_manager": 10257,
    "scheduler": 10259,
    "api_proxy": 6444,
    "api_proxy_admin": 8474,
    "kubelet": 10250,
    "kubelet_healthz": 10248,
    "sshd": 2222,
    "kubelet_2": 10350,
    "kubelet_healthz_2": 10348,
}


def _now() -> dict[str, Any]:
    paths = Paths(Path("/lab/root"), Path("/lab/run"))
    out: dict[str, Any] = {}
    for index in (1, 2):
        node = Node(index, paths)
        for name in components.ORDER:
            if name == "kubelet":  # started by its kubelet-service script, not an argv
                continue
            spec = components.argv_for(name, paths, PORTS, node)
            out[f"{name}@{index}"] = {
                "name": spec.name,
                "argv": list(spec.argv),
                "netns": spec.netns,
                "env": spec.env,
                "cwd": None if spec.cwd is None else str(spec.cwd),
            }
    out["ORDER"] = list(components.ORDER)
    out["NODE_COMPONENTS"] = list(components.NODE_COMPONENTS)
    out["EXPECT"] = dict(components.EXPECT)
    return out


def test_every_components_argv_is_as_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # containerd's PATH starts from the caller's
    pinned = json.loads(PINNED.read_text())
    now = _now()
    assert sorted(now) == sorted(pinned)
    for key, value in pinned.items():
        assert now[key] == value, key
