"""--kubeconfig/--context, context: in a profile, KUBECONFIG merged as kubectl merges it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from abtest.cli.options import with_kube
from abtest.cluster import kubeconfig as kc
from abtest.cluster.client import connect
from abtest.config.playbook import NodeProfile, load_profile, parse_profile
from abtest.errors import ClusterError, UserError


def _kubeconfig(path: Path, current: str | None, contexts: dict[str, str]) -> Path:
    """A kubeconfig with one cluster and one context per (name, server)."""
    data: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": f"c-{n}", "cluster": {"server": s}} for n, s in contexts.items()],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": f"c-{n}", "user": "u"}} for n in contexts],
    }
    if current:
        data["current-context"] = current
    path.write_text(yaml.safe_dump(data))
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_ambient_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_kubeconfig_list_first_current_context_wins_as_in_kubectl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _kubeconfig(tmp_path / "a.yaml", "alpha", {"alpha": "https://10.0.0.1:6443"})
    second = _kubeconfig(
        tmp_path / "b.yaml",
        "beta",
        {"beta": "https://10.0.0.2:6443", "alpha": "https://10.9.9.9:6443"},
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing.yaml'}:{second}")
    cfg = client.Configuration()
    source = kc.load(cfg, None, None)
    # kubectl: the first file's current-context, and the first definition of a name wins.
    assert source.context == "alpha"
    assert cfg.host == "https://10.0.0.1:6443"
    assert source.files == (str(first), str(second))
    cfg = client.Configuration()
    assert kc.load(cfg, None, "beta").server == "https://10.0.0.2:6443"


def test_explicit_kubeconfig_beats_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _kubeconfig(tmp_path / "env.yaml", "env", {"env": "https://10.0.0.3:6443"})
    mine = _kubeconfig(tmp_path / "mine.yaml", "mine", {"mine": "https://10.0.0.4:6443"})
    monkeypatch.setenv("KUBECONFIG", str(env))
    assert connect(str(mine)).configuration.host == "https://10.0.0.4:6443"
    assert connect(None).configuration.host == "https://10.0.0.3:6443"


def test_unknown_context_is_a_user_error_listing_the_contexts(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "k.yaml", "good", {"good": "https://10.0.0.5:6443"})
    with pytest.raises(UserError) as info:
        connect(str(path), context="nope")
    text = str(info.value)
    assert "'nope'" in text and str(path) in text and "contexts there: good" in text


def test_no_kubeconfig_anywhere_says_what_to_do() -> None:
    with pytest.raises(UserError, match="no kubeconfig file found"):
        connect(None)


def test_in_cluster_service_account_when_no_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pod's token file cannot be created here; the decision is what is under test.
    seen: list[client.Configuration] = []

    def fake_incluster(client_configuration: client.Configuration) -> None:
        client_configuration.host = "https://10.96.0.1:443"
        seen.append(client_configuration)

    monkeypatch.setattr(kc, "in_cluster", lambda: True)
    monkeypatch.setattr(config, "load_incluster_config", fake_incluster)
    cluster = connect(None)
    assert seen and cluster.source is not None and cluster.source.files == ()
    assert "in-cluster service account" in cluster.source.describe()
    with pytest.raises(UserError, match="service account"):
        connect(None, context="x")


def test_profile_context_key(tmp_path: Path) -> None:
    lab = Path(load_profile("lab").source).read_text()
    path = tmp_path / "p.yaml"
    path.write_text(lab.replace("node_name: abtest-lab\n", "node_name: abtest-lab\ncontext: ci\n"))
    assert parse_profile(path).kube_context == "ci"
    assert load_profile("lab").kube_context is None


def test_wrong_context_on_the_command_line_is_one_clear_error(tmp_path: Path) -> None:
    port = _closed_port()
    path = _kubeconfig(tmp_path / "k.yaml", "wrong", {"wrong": f"https://127.0.0.1:{port}"})
    profile: NodeProfile = replace(load_profile("lab"), kubeconfig="/nonexistent")
    with pytest.raises(ClusterError) as info:
        with_kube(profile, str(path), "wrong")
    text = str(info.value)
    assert "context 'wrong'" in text and f"127.0.0.1:{port}" in text and str(path) in text
    assert "cannot reach the API server" in text
    # No flag: the profile is used as it is, nothing is probed.
    assert with_kube(profile, None, None) is profile


def test_cli_exit_code_for_an_unknown_context(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "k.yaml", "good", {"good": "https://127.0.0.1:1"})
    args = ["node", "show", "--profile", "lab", "--kubeconfig", str(path), "--context", "bad"]
    done = subprocess.run(
        [sys.executable, "-c", "from abtest.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "'bad'" in done.stderr and "contexts there: good" in done.stderr


@pytest.mark.lab
def test_context_on_the_lab_good_and_wrong(lab_profile: NodeProfile, tmp_path: Path) -> None:
    """Read-only: a kubeconfig with the lab admin's context and a wrong one (closed port)."""
    assert lab_profile.kubeconfig
    admin = yaml.safe_load(Path(lab_profile.kubeconfig).read_text())
    current = admin["current-context"]
    ctx = next(c for c in admin["contexts"] if c["name"] == current)["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == ctx["cluster"])["cluster"]
    port = _closed_port()
    admin["clusters"].append(
        {"name": "wrong-cluster", "cluster": {**cluster, "server": f"https://127.0.0.1:{port}"}}
    )
    admin["contexts"] = [
        {"name": "good", "context": ctx},
        {"name": "wrong", "context": {**ctx, "cluster": "wrong-cluster"}},
    ]
    admin["current-context"] = "wrong"
    path = tmp_path / "two-contexts.kubeconfig"
    path.write_text(yaml.safe_dump(admin))

    def show(context: str) -> subprocess.CompletedProcess[str]:
        args = [
            "node",
            "show",
            "--profile",
            "lab",
            "--kubeconfig",
            str(path),
            "--json",
            "--context",
        ]
        return subprocess.run(
            [sys.executable, "-c", "from abtest.cli.main import main; main()", *args, context],
            capture_output=True,
            text=True,
            timeout=300,
        )

    good = show("good")
    assert good.returncode == 0, good.stderr
    state = json.loads(good.stdout)
    assert state["ready"] is True and state["kubelet_version"]
    assert not [p for p in state["problems"] if p.startswith("api:")]

    wrong = show("wrong")
    assert wrong.returncode == ClusterError.exit_code, wrong.stderr
    lines = wrong.stderr.strip().splitlines()
    assert len(lines) == 1, wrong.stderr
    assert "context 'wrong'" in lines[0] and f"127.0.0.1:{port}" in lines[0]
    assert wrong.stdout == ""
