"""On the real lab: etcd authenticates its clients, and the lab's secrets are private
(issue 11 item 9)."""

from __future__ import annotations

import grp
import pwd
import socket
import ssl
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from abtest.lab import components, layout
from abtest.lab.layout import LabState, Paths

pytestmark = pytest.mark.lab

# What a refused TLS client sees: the handshake fails (TLS 1.2) or the server's alert
# arrives on the first read (TLS 1.3), or the connection is reset.
REFUSED = (ssl.SSLError, urllib.error.URLError, ConnectionError)


@pytest.fixture(scope="module")
def etcd_ports(lab_up: None) -> dict[str, int]:
    state = LabState.load(Paths())
    assert state is not None
    return state.ports


def _get(url: str, ctx: ssl.SSLContext | None) -> bytes:
    with urllib.request.urlopen(url, timeout=10, context=ctx) as resp:
        return bytes(resp.read())


def test_etcd_answers_the_api_servers_client_certificate(etcd_ports: dict[str, int]) -> None:
    paths = Paths()
    ctx = components.etcd_tls(paths)
    assert b'"health":"true"' in _get(components.etcd_url(etcd_ports, "/health"), ctx)
    assert b"etcdserver" in _get(components.etcd_url(etcd_ports, "/version"), ctx)
    members = components.etcd_post(paths, etcd_ports, "/v3/cluster/member/list", {})
    # Data from a plain-HTTP lab kept its old peer URL until `up` corrected it.
    assert [m["peerURLs"] for m in members["members"]] == [
        [f"https://127.0.0.1:{etcd_ports['etcd_peer']}"]
    ]
    assert [m["clientURLs"] for m in members["members"]] == [[components.etcd_url(etcd_ports)]]


def test_etcd_refuses_a_client_without_a_certificate(etcd_ports: dict[str, int]) -> None:
    ctx = components.etcd_tls(Paths(), client=False)  # verifies etcd, presents nothing
    with pytest.raises(REFUSED):
        _get(components.etcd_url(etcd_ports, "/version"), ctx)


def test_etcd_refuses_plain_http(etcd_ports: dict[str, int]) -> None:
    url = f"http://127.0.0.1:{etcd_ports['etcd']}/version"
    try:
        body = _get(url, None)
    except urllib.error.HTTPError as exc:
        # Go's TLS listener answers a plain request with 400 and no etcd data.
        assert exc.code == 400
        assert b"etcdserver" not in exc.read()
    except (urllib.error.URLError, ConnectionError):
        pass
    else:
        pytest.fail(f"etcd answered plain HTTP: {body[:200]!r}")


def test_etcd_refuses_every_other_lab_certificate(etcd_ports: dict[str, int]) -> None:
    """The cluster CA's admin (system:masters) and kubelet certs are not etcd's: only the
    API server's etcd client cert, from etcd's own CA, is accepted."""
    paths = Paths()
    for name in ("admin", "kubelet", "apiserver-kubelet-client"):
        ctx = components.etcd_tls(paths, client=False)
        ctx.load_cert_chain(str(paths.pki / f"{name}.crt"), str(paths.pki / f"{name}.key"))
        with pytest.raises(REFUSED):
            _get(components.etcd_url(etcd_ports, "/version"), ctx)


def test_etcd_peer_port_refuses_a_client_without_a_certificate(
    etcd_ports: dict[str, int],
) -> None:
    ctx = components.etcd_tls(Paths(), client=False)
    with pytest.raises(REFUSED):
        _get(f"https://127.0.0.1:{etcd_ports['etcd_peer']}/members", ctx)
    with pytest.raises(REFUSED):
        _get(f"http://127.0.0.1:{etcd_ports['etcd_peer']}/members", None)


def test_etcd_listens_on_loopback_only(etcd_ports: dict[str, int]) -> None:
    for port in (etcd_ports["etcd"], etcd_ports["etcd_peer"]):
        listeners = _tcp_listeners(port)
        assert listeners and listeners <= {"127.0.0.1"}, (port, listeners)


def _tcp_listeners(port: int) -> set[str]:
    """Local addresses listening on `port` (from /proc/net/tcp, IPv4 and IPv6)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            addr, hexport = cols[1].split(":")
            if cols[3] != "0A" or int(hexport, 16) != port:  # 0A = LISTEN
                continue
            raw = bytes.fromhex(addr)
            if width == 8:
                found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def test_the_labs_keys_kubeconfigs_and_directories_are_private(lab_up: None) -> None:
    paths = Paths()
    group = grp.getgrnam(layout.SSH_USER).gr_gid
    children = [p for top in (paths.root, paths.run) for p in top.iterdir() if p.is_dir()]
    for d in sorted({*paths.all_dirs(), *children} - {paths.home}):
        st = d.stat()
        if d in (paths.root, paths.ssh):
            # The lab user's group may traverse to its authorized_keys (sshd reads it as
            # that user); nobody else may enter.
            assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o710, 0, group), d
        else:
            assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, 0), d
    secrets = [
        *paths.pki.rglob("*.key"),
        *paths.root.glob("*.kubeconfig"),
        paths.ssh / "client_ed25519",
        paths.ssh / "host_ed25519",
        paths.ssh / "sshd_config",
        paths.state_file,
    ]
    assert len([p for p in secrets if p.suffix == ".key"]) >= 12
    for path in secrets:
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, 0), path
    home = paths.home.stat()
    assert stat.S_IMODE(home.st_mode) == 0o700 and home.st_uid != 0


def _as_user(uid: int, gid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, user=uid, group=gid, extra_groups=[], capture_output=True, text=True, timeout=30
    )


def test_another_local_user_can_read_nothing_of_the_lab(lab_up: None) -> None:
    paths = Paths()
    nobody = pwd.getpwnam("nobody")
    for argv in (
        ["ls", str(paths.root)],
        ["cat", str(paths.kubeconfig)],
        ["cat", str(paths.pki / "ca.key")],
        ["cat", str(paths.etcd_pki / "ca.key")],
        ["cat", str(paths.ssh / "client_ed25519")],
        ["ls", str(paths.run)],
    ):
        proc = _as_user(nobody.pw_uid, nobody.pw_gid, argv)
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, argv


def test_the_lab_user_reaches_its_authorized_keys_and_nothing_else(lab_up: None) -> None:
    paths = Paths()
    pw = pwd.getpwnam(layout.SSH_USER)
    proc = _as_user(pw.pw_uid, pw.pw_gid, ["cat", str(paths.ssh / "authorized_keys")])
    assert proc.returncode == 0 and proc.stdout.startswith("ssh-ed25519 "), proc.stderr
    for argv in (
        ["ls", str(paths.root)],
        ["cat", str(paths.kubeconfig)],
        ["cat", str(paths.ssh / "client_ed25519")],
        ["ls", str(paths.pki)],
    ):
        proc = _as_user(pw.pw_uid, pw.pw_gid, argv)
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, argv
