"""Issue 25's trust boundaries, each with the test that would have caught it: what a user
types never runs a command on the controller, reaches another host, forges a known_hosts line,
prints a credential or removes sandboxes that are not ours; a symlinked kubelet binary stays a
symlink; the lock's temp file is not predictable; the results database is private; and one
profile rule holds in every command."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest
from bad_input import invoke

from abtest.cluster.kubeconfig import redact
from abtest.config import datafiles
from abtest.config.playbook import SSHTarget, load_profile
from abtest.errors import ConfigError, HostKeyError, NodeError
from abtest.lab import nodes as lab_nodes
from abtest.node import lock
from abtest.node.ssh import Connection, _HostKeyPolicy
from abtest.node.ssh_config import expand_proxy_command, resolve
from abtest.store.db import Store
from abtest.testing import FakeHost

CONFIG = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
GOOD_KUBELET = b"#!/bin/sh\n# the original kubelet\nexit 0\n"


def _target(tmp_path: Path, config: str, **kw: object) -> SSHTarget:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(config)
    base = SSHTarget("node", None, None, None, False, str(tmp_path / "kh"), str(cfg))
    return replace(base, **kw)  # type: ignore[arg-type]


# --- local command execution through ProxyCommand ------------------------------------------


def test_proxy_command_tokens_come_from_the_resolved_validated_values(tmp_path: Path) -> None:
    target = _target(
        tmp_path,
        "Host node\n  HostName 10.0.0.7\n  Port 2200\n  User ops\n"
        '  ProxyCommand sh -c "nc %h %p # %r %n 100%%"\n',
        port=2222,
    )
    ep = resolve(target)
    # %p is the profile's port (paramiko used the config's), %% a literal percent
    assert ep.proxy_command == 'sh -c "nc 10.0.0.7 2222 # ops 10.0.0.7 100%"'


def test_a_host_with_shell_characters_never_reaches_the_proxy_command(tmp_path: Path) -> None:
    witness = tmp_path / "X"
    target = _target(
        tmp_path, 'Host *\n  ProxyCommand sh -c "nc %h %p"\n', host=f"127.0.0.1;touch {witness};"
    )
    with pytest.raises(ConfigError, match="invalid host name"):
        Connection(target)
    assert not witness.exists()


def test_a_config_hostname_with_shell_characters_is_refused(tmp_path: Path) -> None:
    target = _target(tmp_path, "Host node\n  HostName a$(id)\n  ProxyCommand nc %h %p\n")
    with pytest.raises(ConfigError, match="HostName of 'node'"):
        resolve(target)


def test_unknown_proxy_tokens_are_refused_not_passed_to_a_shell() -> None:
    with pytest.raises(ConfigError, match="%C"):
        expand_proxy_command("nc %C", host="h", port=22, user="u")


def test_a_proxy_command_that_exits_is_one_error_and_no_paramiko_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    target = _target(tmp_path, "Host node\n  HostName 127.0.0.1\n  ProxyCommand true\n")
    with pytest.raises(NodeError, match="cannot connect"):
        Connection(target, connect_timeout=2).open()
    assert "Traceback" not in capfd.readouterr().err
    paramiko_log = logging.getLogger("paramiko")
    assert not paramiko_log.propagate and paramiko_log.handlers


# --- known_hosts lines that cannot be forged ---------------------------------------------------


def _policy(tmp_path: Path) -> tuple[_HostKeyPolicy, Path]:
    known = tmp_path / "known_hosts"
    ep = resolve(_target(tmp_path, "", known_hosts=str(known)))
    return _HostKeyPolicy(ep, accept_new=True), known


@pytest.mark.parametrize(
    "name", ["a\n* ssh-ed25519 AAAA", "*", "a b", "a,b", "!a", "|1|x|y", "[a]:22\nb"]
)
def test_accept_new_never_writes_a_name_that_makes_its_own_line(tmp_path: Path, name: str) -> None:
    policy, known = _policy(tmp_path)
    generated = paramiko.RSAKey.generate(1024)
    with pytest.raises(HostKeyError, match="refusing to record"):
        policy.missing_host_key(paramiko.SSHClient(), name, generated)
    assert not known.exists()


def test_accept_new_writes_one_line_for_a_plain_name(tmp_path: Path) -> None:
    policy, known = _policy(tmp_path)
    generated = paramiko.RSAKey.generate(1024)
    policy.missing_host_key(paramiko.SSHClient(), "[10.0.0.7]:2222", generated)
    lines = known.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[10.0.0.7]:2222 ssh-rsa ")


# --- secrets, sandboxes ------------------------------------------------------------------------


def test_redact_removes_credentials_from_client_errors() -> None:
    token = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.payload.signature"
    text = redact(f"Invalid kube-config file. token: {token} password=hunter2")
    assert token not in text and "hunter2" not in text


def test_every_shipped_profile_keeps_the_ids_placeholder() -> None:
    for path in (datafiles.data_dir("playbooks") / "nodes").glob("*.yaml"):
        profile = load_profile(str(path))
        for command in (profile.sandbox_remove_command, profile.sandbox_stop_command):
            assert command is None or "{ids}" in command


# --- the node: symlinked binary, lock temp file ----------------------------------------------


def test_a_symlinked_binary_path_stays_a_symlink_through_swap_and_restore(
    tmp_path: Path, store: Store
) -> None:
    host = FakeHost(tmp_path / "node", config=CONFIG)
    profile = host.profile()
    link = Path(profile.kubelet_binary_path)
    real = link.with_name("kubelet-1.34")
    real.write_bytes(link.read_bytes())
    real.chmod(0o755)
    link.unlink()
    link.symlink_to(real.name)
    candidate = tmp_path / "kubelet-rc1"
    candidate.write_bytes(GOOD_KUBELET + b"# rc1\n")
    with host.controller(store) as ctl:
        ctl.install_kubelet_binary(str(candidate))
        assert link.is_symlink() and real.read_bytes() == candidate.read_bytes()
        ctl.restore()
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_bytes() != candidate.read_bytes()


def test_the_lock_replace_script_uses_an_unpredictable_temp_file(tmp_path: Path) -> None:
    assert "$$" not in lock._REPLACE_SCRIPT and "mktemp" in lock._REPLACE_SCRIPT
    target = tmp_path / "node.lock"
    target.write_text("old")
    subprocess.run(
        ["sh", "-c", lock._REPLACE_SCRIPT, "abtest-lock", str(target)],
        input=b"new",
        check=True,
    )
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.lock"]


# --- the results database -------------------------------------------------------------------


def test_a_new_results_database_is_private(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    with Store(path) as st:
        st.runs_frame()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for side in tmp_path.glob("results.sqlite-*"):
            assert stat.S_IMODE(side.stat().st_mode) == 0o600


# --- one profile rule ---------------------------------------------------------------------------


def test_a_file_in_the_working_folder_is_that_file_not_the_shipped_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = datafiles.data_dir("playbooks") / "nodes" / "kubeadm-systemd.yaml"
    local = tmp_path / "kubeadm-systemd.yaml"
    local.write_text(shipped.read_text().replace("node_name:", "node_name: edited-node #", 1))
    edited = load_profile(str(local)).node_name
    monkeypatch.chdir(tmp_path)
    assert load_profile("kubeadm-systemd.yaml").node_name == edited
    assert load_profile("kubeadm-systemd").source == str(shipped)  # no file of that name
    out = invoke(
        ["plan", "--playbook", "lab-sweep", "--profile", "kubeadm-systemd.yaml", "--json"],
        tmp_path,
        capsys,
    )
    assert out.code == 0, out.err
    assert edited in out.out


def test_the_path_lab_status_prints_works_from_any_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = lab_nodes.SHIPPED_PROFILE
    assert Path(printed).is_absolute() and Path(printed).is_file()
    for folder in (tmp_path, datafiles.data_dir("playbooks").parent):
        out = invoke(["plan", "--playbook", "lab-sweep", "--profile", printed], folder, capsys)
        assert out.code == 0, out.err


def test_the_repo_relative_profile_path_works_from_the_repo_root(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = datafiles.data_dir("playbooks").parent
    if not (root / "playbooks" / "nodes" / "lab.yaml").is_file():
        pytest.skip("an installed wheel: no repository root")
    args = ["plan", "--playbook", "lab-sweep", "--profile", "playbooks/nodes/lab.yaml"]
    out = invoke(args, root, capsys)
    assert out.code == 0, out.err


@pytest.mark.parametrize("command", ["node check", "batch", "plan", "gates", "regress"])
def test_every_command_states_the_profile_rule_in_its_help(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = invoke([*command.split(), "--help"], tmp_path, capsys)
    assert out.code == 0
    flat = " ".join(out.out.replace("│", " ").split())
    assert "existing YAML file is that file" in flat, flat
