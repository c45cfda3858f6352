"""SSH config as OpenSSH reads it (issue 11 item 8): User and IdentityFile from the config,
every known-hosts file, ProxyJump and ProxyCommand; host keys as strict as before.

Unit tests run paramiko's own config parser on files in tmp_path; the lab test connects to
the lab's sshd through itself as the jump host.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest

from abtest.config.playbook import NodeProfile, SSHTarget
from abtest.errors import HostKeyError, NodeError
from abtest.node.ssh import Connection
from abtest.node.ssh_config import (
    DEFAULT_GLOBAL_KNOWN_HOSTS,
    load_known_hosts,
    resolve,
)


def _target(tmp_path: Path, config: str, **kw: object) -> SSHTarget:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(config)
    base = SSHTarget(
        host="node",
        port=None,
        user=None,
        key_file=None,
        use_agent=False,
        known_hosts=None,
        config_file=str(cfg),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _key(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text("not really a key")
    return str(path)


def test_user_and_identity_file_come_from_the_config(tmp_path: Path) -> None:
    key = _key(tmp_path, "id_node")
    target = _target(
        tmp_path,
        f"Host node\n  HostName 10.0.0.5\n  User ops\n  IdentityFile {key}\n  Port 2200\n",
    )
    ep = resolve(target)
    assert (ep.hostname, ep.port, ep.user, ep.key_files) == ("10.0.0.5", 2200, "ops", (key,))
    # the profile's own fields win
    ep = resolve(replace(target, user="root", key_file="/k", port=22))
    assert (ep.user, ep.key_files, ep.port) == ("root", ("/k",), 22)


def test_user_and_identity_file_from_home_ssh_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ssh config in the profile: ~/.ssh/config, as OpenSSH."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = _key(home / ".ssh", "id_ed25519")
    (home / ".ssh" / "config").write_text(f"Host node\n  User deploy\n  IdentityFile {key}\n")
    monkeypatch.setenv("HOME", str(home))
    ep = resolve(replace(_target(tmp_path, ""), config_file=None))
    assert (ep.user, ep.key_files) == ("deploy", (key,))
    assert ep.known_hosts_files[:2] == (
        str(home / ".ssh" / "known_hosts"),
        str(home / ".ssh" / "known_hosts2"),
    )
    assert ep.known_hosts_files[2:] == DEFAULT_GLOBAL_KNOWN_HOSTS
    assert ep.known_hosts == str(home / ".ssh" / "known_hosts")  # new keys go here


def test_every_known_hosts_file_is_read_profile_replaces_user_files(tmp_path: Path) -> None:
    """The profile's known_hosts is `ssh -o UserKnownHostsFile=`: it replaces the config's
    user files (so a profile pointing at an empty file really sees an unknown host); the
    global files are still read."""
    target = _target(
        tmp_path,
        "Host node\n"
        f"  UserKnownHostsFile {tmp_path}/u1 {tmp_path}/u2\n"
        f"  GlobalKnownHostsFile {tmp_path}/g1 {tmp_path}/g2\n",
    )
    ep = resolve(target)
    assert ep.known_hosts_files == tuple(f"{tmp_path}/{n}" for n in ("u1", "u2", "g1", "g2"))
    assert ep.known_hosts == f"{tmp_path}/u1"
    ep = resolve(replace(target, known_hosts=str(tmp_path / "p")))
    assert ep.known_hosts_files == tuple(f"{tmp_path}/{n}" for n in ("p", "g1", "g2"))
    assert ep.known_hosts == f"{tmp_path}/p"


def test_proxyjump_hops_are_resolved_through_the_config(tmp_path: Path) -> None:
    key = _key(tmp_path, "id_bastion")
    target = _target(
        tmp_path,
        "Host bastion\n"
        "  HostName 203.0.113.1\n"
        "  User jump\n"
        "  Port 2022\n"
        f"  IdentityFile {key}\n"
        "Host node\n"
        "  HostName 10.0.0.5\n"
        "  User ops\n"
        "  ProxyJump bastion,admin@inner:2200\n",
    )
    ep = resolve(target)
    assert [(j.hostname, j.port, j.user) for j in ep.jumps] == [
        ("203.0.113.1", 2022, "jump"),
        ("inner", 2200, "admin"),
    ]
    assert ep.jumps[0].key_files == (key,)
    assert ep.proxy_command is None
    assert "via" in ep.describe() and "203.0.113.1" in ep.describe()
    # the jump hosts' keys are checked against the same files as the target's
    assert ep.jumps[0].known_hosts_files == ep.known_hosts_files


def test_proxyjump_forms_none_and_loops(tmp_path: Path) -> None:
    ep = resolve(_target(tmp_path, "Host node\n  ProxyJump ssh://u@[2001:db8::1]:2222\n"))
    assert [(j.user, j.hostname, j.port) for j in ep.jumps] == [("u", "2001:db8::1", 2222)]
    assert resolve(_target(tmp_path, "Host node\n  ProxyJump none\n")).jumps == ()
    looping = _target(tmp_path, "Host node\n  ProxyJump hop\nHost hop\n  ProxyJump node\n")
    with pytest.raises(NodeError, match="ProxyJump loop"):
        resolve(looping)
    with pytest.raises(NodeError, match="not \\[user@\\]host"):
        resolve(_target(tmp_path, "Host node\n  ProxyJump a@b@c\n"))


def test_first_hop_follows_its_own_proxyjump(tmp_path: Path) -> None:
    ep = resolve(
        _target(
            tmp_path,
            "Host node\n  ProxyJump mid\nHost mid\n  ProxyJump outer\n  HostName 10.1.1.1\n",
        )
    )
    assert [j.hostname for j in ep.jumps] == ["10.1.1.1"]
    assert [j.alias for j in ep.jumps[0].jumps] == ["outer"]


def test_proxycommand_is_kept_with_tokens_expanded(tmp_path: Path) -> None:
    ep = resolve(
        _target(tmp_path, "Host node\n  HostName 10.0.0.5\n  ProxyCommand nc -X 5 %h %p\n")
    )
    assert ep.proxy_command == "nc -X 5 10.0.0.5 22"
    assert resolve(_target(tmp_path, "Host node\n  ProxyCommand none\n")).proxy_command is None


# --------------------------------------------------------------------------- known hosts


def _ed25519() -> paramiko.PKey:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    raw = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    blob = b"".join(len(x).to_bytes(4, "big") + x for x in (b"ssh-ed25519", raw))
    return paramiko.PKey.from_type_string("ssh-ed25519", blob)


def _line(names: str, key: paramiko.PKey) -> str:
    return f"{names} {key.get_name()} {key.get_base64()}\n"


def test_known_hosts_merge_first_file_wins_and_odd_lines_are_skipped(tmp_path: Path) -> None:
    a, b, c = _ed25519(), _ed25519(), _ed25519()
    user, glob = tmp_path / "known_hosts", tmp_path / "ssh_known_hosts"
    hashed = paramiko.HostKeys.hash_host("[hashed.example]:2222")
    user.write_text(
        "# comment\n"
        + _line("[10.0.0.5]:2200", a)
        + "@cert-authority *.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5\n"
        + "garbage line\n"
        + "host ssh-unknown-type AAAA\n"
        + _line(hashed, c)
    )
    glob.write_text(_line("[10.0.0.5]:2200", b) + _line("global-only", b))
    known = load_known_hosts((str(user), str(tmp_path / "missing"), str(glob)))
    from_user = known.keys.lookup("[10.0.0.5]:2200")
    from_global = known.keys.lookup("global-only")
    from_hashed = known.keys.lookup("[hashed.example]:2222")
    assert from_user is not None and from_global is not None and from_hashed is not None
    assert from_user["ssh-ed25519"] == a  # the user file decides
    assert from_global["ssh-ed25519"] == b  # the global file is read
    assert from_hashed["ssh-ed25519"] == c
    assert known.keys.lookup("anything.example") is None  # a CA line makes nothing known


def test_revoked_keys_are_refused(tmp_path: Path) -> None:
    good, bad = _ed25519(), _ed25519()
    kh = tmp_path / "known_hosts"
    kh.write_text(
        _line("node", bad)
        + f"@revoked * {bad.get_name()} {bad.get_base64()}\n"
        + f"@revoked !node,* {good.get_name()} {good.get_base64()}\n"
    )
    known = load_known_hosts((str(kh),))
    assert known.is_revoked("node", bad)
    assert known.is_revoked("[10.0.0.5]:2200", bad)
    assert not known.is_revoked("node", good)  # negated for this host
    assert known.is_revoked("other", good)


def test_unreadable_known_hosts_is_an_error(tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    kh.mkdir()  # a directory: is_file() is False, so it is skipped like a missing file
    assert load_known_hosts((str(kh),)).keys.keys() == []
    f = tmp_path / "kh2"
    f.write_text("")
    f.chmod(0)
    if os.geteuid() != 0:  # root reads anything
        with pytest.raises(HostKeyError, match="cannot read known_hosts"):
            load_known_hosts((str(f),))


# --------------------------------------------------------------------------- the lab


def _lab_jump_target(profile: NodeProfile, tmp_path: Path, known_hosts_line: str) -> SSHTarget:
    """The lab node behind a ProxyJump through the lab's own sshd (as its bastion); its host
    key only in the *second* UserKnownHostsFile, so reading only the first would fail."""
    assert profile.ssh is not None
    lab = resolve(profile.ssh)
    empty, second = tmp_path / "kh-empty", tmp_path / "kh-second"
    empty.write_text("")
    second.write_text(known_hosts_line)
    (tmp_path / "ssh_config").write_text(
        "Host lab-bastion\n"
        f"  HostName {lab.hostname}\n"
        f"  Port {lab.port}\n"
        f"  User {lab.user}\n"
        f"  IdentityFile {lab.key_files[0]}\n"
        f"  UserKnownHostsFile {empty} {second}\n"
        f"  GlobalKnownHostsFile {tmp_path / 'none'}\n"
        "Host lab-via-jump\n"
        f"  HostName {lab.hostname}\n"
        f"  Port {lab.port}\n"
        f"  User {lab.user}\n"
        f"  IdentityFile {lab.key_files[0]}\n"
        "  ProxyJump lab-bastion\n"
        f"  UserKnownHostsFile {empty} {second}\n"
        f"  GlobalKnownHostsFile {tmp_path / 'none'}\n"
    )
    return SSHTarget(
        host="lab-via-jump",
        port=None,
        user=None,
        key_file=None,
        use_agent=False,
        known_hosts=None,
        config_file=str(tmp_path / "ssh_config"),
    )


@pytest.mark.lab
def test_proxyjump_through_the_lab_sshd(lab_profile: NodeProfile, tmp_path: Path) -> None:
    assert lab_profile.ssh is not None
    lab = resolve(lab_profile.ssh)
    line = Path(lab.known_hosts).read_text()
    target = _lab_jump_target(lab_profile, tmp_path, line)
    with Connection(target) as conn:
        assert len(conn.endpoint.jumps) == 1
        res = conn.run(["sh", "-c", "echo $SSH_CLIENT"]).check("echo")
        # the target saw the connection come from the jump host's sshd (loopback)
        assert res.stdout.split()[0] == "127.0.0.1"
        assert conn.read_bytes("/etc/hostname")  # SFTP works through the tunnel too
        # the node's SSH session rides a direct-tcpip channel of the jump host's transport
        transport = conn.open().get_transport()
        assert transport is not None and isinstance(transport.sock, paramiko.Channel)
        assert len(conn._jump_clients) == 1
        jump_transport = conn._jump_clients[0].get_transport()
        assert jump_transport is not None and jump_transport.is_active()
    assert conn._jump_clients == []  # closed with the connection


@pytest.mark.lab
def test_proxyjump_host_keys_stay_strict(lab_profile: NodeProfile, tmp_path: Path) -> None:
    assert lab_profile.ssh is not None
    lab = resolve(lab_profile.ssh)
    line = Path(lab.known_hosts).read_text()
    # the jump host (and the node) unknown: refused before anything runs
    target = _lab_jump_target(lab_profile, tmp_path, "")
    with pytest.raises(HostKeyError, match="is not in"), Connection(target) as conn:
        conn.run(["true"])
    # a wrong key on file for the jump host: CHANGED, never accepted, even with accept-new
    other = _ed25519()
    name = line.split()[0]
    wrong = f"{name} {other.get_name()} {other.get_base64()}\n"
    target = _lab_jump_target(lab_profile, tmp_path, wrong)
    with (
        pytest.raises(HostKeyError, match="CHANGED"),
        Connection(target, accept_new_host_key=True) as conn,
    ):
        conn.run(["true"])
    # the right key, but revoked
    revoked = "@revoked * " + " ".join(line.split()[1:]) + "\n"
    target = _lab_jump_target(lab_profile, tmp_path, line + revoked)
    with pytest.raises(HostKeyError, match="revoked"), Connection(target) as conn:
        conn.run(["true"])


@pytest.mark.lab
def test_proxycommand_to_the_lab_sshd(lab_profile: NodeProfile, tmp_path: Path) -> None:
    assert lab_profile.ssh is not None
    lab = resolve(lab_profile.ssh)
    known = tmp_path / "known_hosts"
    known.write_text(Path(lab.known_hosts).read_text())
    (tmp_path / "ssh_config").write_text(
        "Host lab-via-command\n"
        f"  HostName {lab.hostname}\n"
        f"  Port {lab.port}\n"
        f"  User {lab.user}\n"
        f"  IdentityFile {lab.key_files[0]}\n"
        "  ProxyCommand socat - TCP:%h:%p\n"
        f"  UserKnownHostsFile {known}\n"
        f"  GlobalKnownHostsFile {tmp_path / 'none'}\n"
    )
    target = SSHTarget(
        host="lab-via-command",
        port=None,
        user=None,
        key_file=None,
        use_agent=False,
        known_hosts=None,
        config_file=str(tmp_path / "ssh_config"),
    )
    with Connection(target) as conn:
        assert conn.endpoint.proxy_command == f"socat - TCP:{lab.hostname}:{lab.port}"
        transport = conn.open().get_transport()
        assert transport is not None and isinstance(transport.sock, paramiko.ProxyCommand)
        assert conn.run(["true"]).ok
    # the host key is checked through the command too
    known.write_text("")
    with pytest.raises(HostKeyError, match="is not in"), Connection(target) as conn:
        conn.run(["true"])
