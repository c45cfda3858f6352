"""Pure parts of node control: lock content, metric/configz parsing, value comparison,
quoting and validation, the journal, signal handling. No server needed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from abtest.cluster.nodes import parse_configz, parse_feature_enabled
from abtest.config.playbook import NodeProfile, SSHTarget, load_profile
from abtest.errors import ClusterError, Interrupted, NodeError, UserError
from abtest.node import ssh as ssh_mod
from abtest.node.connection import Result
from abtest.node.control import describe_settings
from abtest.node.health import (
    Expectation,
    compare,
    go_duration_seconds,
    healthz_command,
    healthz_url,
    restore_expectations,
    running_values,
    unknown_paths,
    values_match,
)
from abtest.node.lock import LockInfo, new_info, process_start
from abtest.node.session import NodeSession
from abtest.node.ssh_config import resolve
from abtest.process.stop import SignalGuard
from abtest.store.db import Store
from abtest.store.journal import APPLIED, APPLYING, RESTORED, Journal

METRICS = """\
# HELP kubernetes_feature_enabled [BETA] This metric records ... enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="ContainerCheckpoint",stage="BETA"} 1
kubernetes_feature_enabled{name="KubeletPodResourcesGet",stage="BETA"} 0
kubernetes_feature_enabled{stage="",name="APIServerTracing"} 1
kubernetes_feature_enabled{name="Odd\\"Name",stage="ALPHA"} 0 1712345678000
kubernetes_feature_enabled_total{name="NotAGate"} 1
kubelet_running_pods 3
"""

CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzPort: 10299
kubeAPIQPS: 50
featureGates:
  ContainerCheckpoint: true
"""


def _profile(tmp_path: Path, **changes: object) -> NodeProfile:
    """The lab profile reaching a node through an ssh_config made in ``tmp_path``, so the
    test runs where the lab was never brought up (its ssh_config is written by `lab up`)."""
    lab = load_profile("lab")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host abtest-lab\n  HostName 127.0.0.1\n  Port 2222\n")
    assert lab.ssh is not None
    ssh = replace(lab.ssh, config_file=str(cfg), known_hosts=str(tmp_path / "known_hosts"))
    return replace(lab, ssh=ssh, **changes)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- metrics


def test_parse_feature_enabled() -> None:
    gates = parse_feature_enabled(METRICS)
    assert gates["ContainerCheckpoint"] is True
    assert gates["KubeletPodResourcesGet"] is False
    assert gates["APIServerTracing"] is True  # label order does not matter
    assert gates['Odd\\"Name'] is False  # escaped quotes and a timestamp
    assert "NotAGate" not in gates
    assert parse_feature_enabled("") == {}


def test_parse_configz() -> None:
    assert parse_configz('{"kubeletconfig": {"kubeAPIQPS": 5}}') == {"kubeAPIQPS": 5}
    with pytest.raises(ClusterError):
        parse_configz("<html>")
    with pytest.raises(ClusterError):
        parse_configz('{"other": 1}')


# --------------------------------------------------------------------------- values


def test_go_duration_seconds() -> None:
    assert go_duration_seconds("1m30s") == 90
    assert go_duration_seconds("500ms") == pytest.approx(0.5)
    assert go_duration_seconds("0s") == 0
    assert go_duration_seconds("0") == 0
    assert go_duration_seconds("1h0m0s") == 3600
    assert go_duration_seconds("abc") is None
    assert go_duration_seconds("10") is None


def test_values_match() -> None:
    assert values_match(5, 5)
    assert values_match(5, 5.0)
    assert values_match(True, True)
    assert not values_match(True, 1)
    assert not values_match(1, True)
    assert values_match("1m", "1m0s")
    assert not values_match("1m", "2m")
    assert values_match("100Mi", "100Mi")


def test_compare_and_running_values() -> None:
    config = {"kubeAPIQPS": 5, "featureGates": {"ContainerCheckpoint": False}}
    gates = {"ContainerCheckpoint": False, "KubeletPodResourcesGet": True}
    exps = [
        Expectation("featureGates.ContainerCheckpoint", False),
        Expectation("kubeAPIQPS", 5),
        Expectation("featureGates.KubeletPodResourcesGet", True, explicit=False),
    ]
    seen, problems = compare(exps, config, gates)
    assert problems == []
    assert seen["featureGates.ContainerCheckpoint"] == {
        "expected": False,
        "configz": False,
        "metric": False,
    }
    # an explicit gate must be in /configz, and the metric must agree
    _, problems = compare([Expectation("featureGates.KubeletPodResourcesGet", True)], config, gates)
    assert len(problems) == 1 and "/configz" in problems[0]
    _, problems = compare([Expectation("featureGates.ContainerCheckpoint", True)], config, gates)
    assert len(problems) == 2
    _, problems = compare([Expectation("kubeAPIQPS", 50)], config, gates)
    assert "expected 50" in problems[0]
    # an older kubelet build as an arm has no such gate: unset in the file, nothing to check;
    # a gate the arm sets explicitly must still be known
    back = Expectation("featureGates.PLEGOnDemandRelist", True, explicit=False)
    seen, problems = compare([back], config, gates)
    assert problems == [] and seen["featureGates.PLEGOnDemandRelist"]["absent"] is True
    _, problems = compare([Expectation("featureGates.PLEGOnDemandRelist", False)], config, gates)
    assert any("not in kubernetes_feature_enabled" in p for p in problems)
    assert running_values(
        ["kubeAPIQPS", "featureGates.ContainerCheckpoint", "nope"], config, gates
    ) == {
        "kubeAPIQPS": 5,
        "featureGates.ContainerCheckpoint": False,
        "nope": None,
    }


def test_unknown_paths() -> None:
    config = {
        "kubeAPIQPS": 5,
        "evictionHard": {"memory.available": "100Mi"},
        "logging": {"format": "text"},
    }
    gates = {"ContainerCheckpoint": True}
    paths = [
        "featureGates.ContainerCheckpoint",
        "featureGates.NoSuchGate",
        "kubeAPIQPS",
        "kubeAPIQPSS",
        "logging.format",
        "evictionHard.nodefs.available",
        "evictionSoft.memory.available",
    ]
    assert unknown_paths(paths, config, gates) == [
        "featureGates.NoSuchGate",
        "kubeAPIQPSS",
        "evictionSoft.memory.available",
    ]


def test_healthz_url_and_command() -> None:
    prof = load_profile("lab")
    assert healthz_url(prof, CONFIG) == "http://127.0.0.1:10299/healthz"
    no_port = CONFIG.replace("healthzPort: 10299\n", "")
    assert healthz_url(prof, no_port) == "http://127.0.0.1:10248/healthz"
    with pytest.raises(NodeError):
        healthz_url(replace(prof, healthz_url="http://x/$(reboot)"), CONFIG)
    argv = healthz_command("http://127.0.0.1:10248/healthz")
    assert argv[:2] == ["sh", "-c"]
    assert "curl -fsS" in argv[2] and "wget -q -O -" in argv[2]


def test_restore_expectations(store: Store) -> None:
    journal = Journal(store)
    entry = journal.begin(
        node_name="n",
        profile_name="p",
        path="/c.yaml",
        original=CONFIG.encode(),
        applied={
            "settings": {"featureGates.KubeletPodResourcesGet": False},
            "paths": [
                "featureGates.ContainerCheckpoint",
                "featureGates.KubeletPodResourcesGet",
                "maxPods",
            ],
            "before": {"featureGates.KubeletPodResourcesGet": True, "maxPods": 110},
        },
    )
    exps = restore_expectations(entry, CONFIG)
    assert exps == [
        Expectation("featureGates.ContainerCheckpoint", True, explicit=True),
        Expectation("featureGates.KubeletPodResourcesGet", True, explicit=False),
        Expectation("maxPods", 110, explicit=False),
    ]


def test_describe_settings() -> None:
    assert describe_settings({"featureGates.X": True, "kubeAPIQPS": 5}) == (
        "featureGates.X=true, kubeAPIQPS=5"
    )


# --------------------------------------------------------------------------- journal


def test_journal_lifecycle(store: Store) -> None:
    journal = Journal(store)
    assert journal.pending("node-a") is None
    original = b"kind: KubeletConfiguration\n\x00binary-safe\n"
    entry = journal.begin(
        node_name="node-a",
        profile_name="lab",
        path="/etc/kubelet.yaml",
        original=original,
        applied={"settings": {"kubeAPIQPS": 5}, "lock_token": "t"},
        backup_path="/etc/kubelet.yaml.abtest-original",
    )
    assert entry.state == APPLYING and entry.pending
    assert journal.pending("node-a") == entry
    assert journal.pending("node-b") is None
    assert journal.original(entry.id) == original
    assert entry.applied["settings"] == {"kubeAPIQPS": 5}
    journal.mark(entry.id, APPLIED, detail="ok")
    assert journal.pending("node-a").state == APPLIED  # type: ignore[union-attr]
    done = journal.mark(entry.id, RESTORED, detail="restored")
    assert not done.pending and done.detail == "restored"
    assert journal.pending("node-a") is None
    assert [e.id for e in journal.history("node-a")] == [entry.id]
    with pytest.raises(ValueError):
        journal.mark(entry.id, "bogus")


# --------------------------------------------------------------------------- lock


def test_lock_info_round_trip_and_liveness() -> None:
    info = new_info("apply featureGates.X=true")
    assert info.pid == os.getpid()
    assert info.host == socket.gethostname()
    assert info.holder.endswith("@" + info.host)
    assert len(info.token) == 16
    data = json.loads(info.to_json())
    assert set(data) == {
        "holder",
        "host",
        "pid",
        "pid_start",
        "started_at",
        "purpose",
        "token",
        "state",
        "claim",
    }
    again = LockInfo.from_json(info.to_json())
    assert again == info
    assert again.holder_alive() is True
    assert "running" in again.describe() and "apply featureGates.X=true" in again.describe()

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = replace(info, pid=child.pid, pid_start=None)
    assert dead.holder_alive() is False
    assert "stale" in dead.describe()
    reused = replace(info, pid_start="1")  # our pid, but another process's start time
    assert reused.holder_alive() is False
    elsewhere = replace(info, host="some-other-controller")
    assert elsewhere.holder_alive() is None
    kept = replace(info, state="kept", purpose="kubeAPIQPS=5; undo: abtest node restore")
    assert "change in effect" in kept.describe()
    assert process_start(os.getpid()) == info.pid_start

    garbage = LockInfo.from_json("not json")
    assert garbage.token == "" and "unreadable" in garbage.purpose


# --------------------------------------------------------------------------- ssh


def test_resolve_alias_from_ssh_config(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    key = tmp_path / "id"
    key.write_text("not really a key")
    cfg.write_text(
        f"Host node-x\n  HostName 10.0.0.7\n  Port 2200\n  User ops\n  IdentityFile {key}\n"
        f"  UserKnownHostsFile {tmp_path}/kh\n"
    )
    target = SSHTarget("node-x", None, None, None, False, None, str(cfg))
    ep = resolve(target)
    assert (ep.hostname, ep.port, ep.user, ep.key_files) == ("10.0.0.7", 2200, "ops", (str(key),))
    assert ep.known_hosts == f"{tmp_path}/kh"
    assert ep.host_key_name == "[10.0.0.7]:2200"
    # explicit profile fields win over the ssh config
    explicit = SSHTarget("node-x", 22, "root", "/k", True, "/kh2", str(cfg))
    ep = resolve(explicit)
    assert (ep.port, ep.user, ep.key_files, ep.known_hosts) == (22, "root", ("/k",), "/kh2")
    assert ep.host_key_name == "10.0.0.7"
    with pytest.raises(NodeError):
        resolve(replace(target, config_file=str(tmp_path / "missing")))


def test_run_quotes_every_argument(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sent: list[str] = []

    def fake_exec(
        self: ssh_mod.Connection, command: str, timeout: float, stdin: bytes | None
    ) -> Result:
        sent.append(command)
        return Result(command, 0, "", "")

    monkeypatch.setattr(ssh_mod.Connection, "_exec", fake_exec)
    (tmp_path / "cfg").write_text("")
    conn = ssh_mod.Connection(
        SSHTarget("h", 22, "u", None, False, "/dev/null", str(tmp_path / "cfg"))
    )
    evil = "x; rm -rf / $(reboot) `id` 'q' \"d\""
    conn.run(["echo", evil])
    conn.run(["cat", "--", "/etc/a b"], sudo=True)
    conn.run_shell("crictl pods -q | wc -l", sudo=True)
    assert shlex.split(sent[0]) == ["echo", evil]
    assert sent[1].startswith("sudo -n -- ") and shlex.split(sent[1]) == [
        "sudo", "-n", "--", "cat", "--", "/etc/a b"
    ]  # fmt: skip
    assert shlex.split(sent[2]) == ["sudo", "-n", "--", "sh", "-c", "crictl pods -q | wc -l"]
    with pytest.raises(ValueError):
        conn.run([])
    with pytest.raises(ValueError):
        conn.run(["echo", "a\x00b"])


def test_session_validates_image_and_counts_lines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prof = _profile(tmp_path)
    calls: list[str] = []
    outputs = {"pods": "abc\n\ndef\n  \n", "inspecti": '{"status": {}}'}

    def fake_shell(self: ssh_mod.Connection, command: str, **kw: object) -> Result:
        calls.append(command)
        key = "inspecti" if "inspecti" in command else "pods"
        return Result(command, 0, outputs[key], "")

    monkeypatch.setattr(ssh_mod.Connection, "run_shell", fake_shell)
    with NodeSession(prof) as node:
        assert node.sandbox_count() == 2
        assert node.image_present("docker.io/library/busybox:1.36.1")
        assert calls[-1].endswith("inspecti -q docker.io/library/busybox:1.36.1")
        for bad in ("busybox; reboot", "$(id)", "a b", "", "-rf"):
            with pytest.raises(UserError):
                node.image_present(bad)
        assert node.kubelet_log_tail(5) == "abc\n\ndef\n  "  # last 5 lines of what came back
        assert "tail -n 5 " in calls[-1]


def test_session_sandbox_count_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def failing(self: ssh_mod.Connection, command: str, **kw: object) -> Result:
        return Result(command, 1, "", "connect: no such file or directory")

    monkeypatch.setattr(ssh_mod.Connection, "run_shell", failing)
    with NodeSession(_profile(tmp_path)) as node, pytest.raises(NodeError, match="no such file"):
        node.sandbox_count()


# --------------------------------------------------------------------------- signals


def test_signal_guard_raises_and_shields() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    with SignalGuard() as guard:
        with pytest.raises(Interrupted) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.5) if hasattr(signal, "sigtimedwait") else None
        assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 143
        done = []
        with pytest.raises(Interrupted), guard.shield():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the shielded block ran to its end")
        assert done
    assert signal.getsignal(signal.SIGTERM) == previous
