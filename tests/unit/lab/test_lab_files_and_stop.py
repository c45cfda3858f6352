"""The lab's file handling, host undo and stop deadline, without a lab (issue 11: 7, 9, 10)."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from abtest.errors import LabError
from abtest.lab import files, host, layout, pki, processes
from abtest.lab.layout import LabState, Paths


@pytest.fixture()
def open_umask() -> Iterator[None]:
    """Umask 0: a file or directory created with a default mode would be world-accessible."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture()
def no_late_chmod(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail on any write that is not created with its final mode: plain Path writes (default
    permissions) and chmod of an existing file (the "write, then chmod" window)."""
    calls: list[str] = []

    def refuse(name: str):  # type: ignore[no-untyped-def]
        def f(self_or_path: object, *args: object, **kwargs: object) -> None:
            calls.append(f"{name}({self_or_path})")
            raise AssertionError(f"{name} called on {self_or_path}")

        return f

    monkeypatch.setattr(Path, "write_bytes", refuse("Path.write_bytes"))
    monkeypatch.setattr(Path, "write_text", refuse("Path.write_text"))
    monkeypatch.setattr(Path, "chmod", refuse("Path.chmod"))
    monkeypatch.setattr(os, "chmod", refuse("os.chmod"))
    return calls


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- item 9: created private from the start -------------------------------------------


def test_make_dir_creates_every_missing_level_0700(tmp_path: Path, open_umask: None) -> None:
    made: list[tuple[str, int]] = []
    real = os.mkdir

    def spy(path: object, mode: int = 0o777, *a: object, **k: object) -> None:
        made.append((str(path), mode))
        real(path, mode)  # type: ignore[arg-type]

    target = tmp_path / "a" / "b" / "c"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "mkdir", spy)
        files.make_dir(target)
    assert [m for _, m in made] == [0o700, 0o700, 0o700]
    for d in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert _mode(d) == 0o700, d


def test_make_dir_tightens_a_directory_an_older_lab_left_open(tmp_path: Path) -> None:
    d = tmp_path / "pki"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    files.make_dir(d)
    assert _mode(d) == 0o700


def test_write_file_creates_the_file_with_its_mode(tmp_path: Path, open_umask: None) -> None:
    opened: list[int] = []
    real = os.open

    def spy(path: object, flags: int, mode: int = 0o777, *a: object, **k: object) -> int:
        if flags & os.O_CREAT:
            opened.append(mode)
        return real(path, flags, mode, *a, **k)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "open", spy)
        files.write_file(tmp_path / "k.key", b"secret")
    assert opened == [0o600]
    assert _mode(tmp_path / "k.key") == 0o600
    assert (tmp_path / "k.key").read_bytes() == b"secret"
    assert [p.name for p in tmp_path.iterdir()] == ["k.key"]  # no temp file left


def test_write_file_replaces_an_open_file_with_a_private_one(tmp_path: Path) -> None:
    old = tmp_path / "admin.kubeconfig"
    old.write_text("old")
    old.chmod(0o644)  # as written by an older lab
    files.write_file(old, "new")
    assert _mode(old) == 0o600 and old.read_text() == "new"


def test_pki_and_kubeconfigs_are_private_from_the_first_byte(
    tmp_path: Path, open_umask: None, no_late_chmod: list[str]
) -> None:
    d = tmp_path / "pki"
    ca = pki.ensure_ca(d)
    etcd_ca = pki.ensure_ca(d / "etcd", cn="abtest-lab-etcd-ca")
    server = pki.issue(etcd_ca, d / "etcd", "server", "etcd", server=True, ips=("127.0.0.1",))
    client = pki.issue(ca, d, "admin", "abtest-admin", org="system:masters", client=True)
    sa = pki.ensure_service_account_key(d)
    kubeconfig = tmp_path / "admin.kubeconfig"
    pki.write_kubeconfig(kubeconfig, "https://127.0.0.1:6443", ca, client, "admin")
    assert no_late_chmod == []
    assert _mode(d) == 0o700 and _mode(d / "etcd") == 0o700
    for key in (ca.key, etcd_ca.key, server.key, client.key, sa, kubeconfig):
        assert _mode(key) == 0o600, key
    for cert in (ca.cert, server.cert, client.cert, d / "sa.pub"):
        assert _mode(cert) == 0o644, cert


def test_the_etcd_ca_is_not_the_cluster_ca(tmp_path: Path) -> None:
    from cryptography import x509

    d = tmp_path / "pki"
    ca = pki.ensure_ca(d)
    etcd_ca = pki.ensure_ca(d / "etcd", cn="abtest-lab-etcd-ca")
    a = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    b = x509.load_pem_x509_certificate(etcd_ca.cert.read_bytes())
    assert a.subject != b.subject and a.public_key() != b.public_key()


def test_lab_state_is_private_and_loads_any_earlier_version(tmp_path: Path) -> None:
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    files.make_dir(paths.root)
    # A state file as the first lab wrote it, plus a field from some other version.
    paths.state_file.write_text(
        json.dumps(
            {
                "ports": {"etcd": 2379},
                "ip_forward_before": "0",
                "mounted_cgroups": ["hugetlb"],
                "started": [],
                "from_the_future": 1,
            }
        )
    )
    state = LabState.load(paths)
    assert state is not None and state.ports == {"etcd": 2379}
    # That version mounted cgroups on mount points it created: down removes them too.
    assert state.cgroup_dirs_made == ["hugetlb"]
    state.save(paths)
    assert _mode(paths.state_file) == 0o600


# --- item 10: /etc/hosts atomically, ip_forward, cgroup mounts ---------------------------


def test_hosts_entry_is_added_and_removed_by_rename(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost")  # no trailing newline
    hosts.chmod(0o644)
    ino = hosts.stat().st_ino
    host.add_hosts_entry(hosts)
    text = hosts.read_text()
    assert text.startswith("127.0.0.1 localhost\n") and layout.HOSTS_MARK in text
    assert hosts.stat().st_ino != ino, "rewritten in place, not replaced"
    assert _mode(hosts) == 0o644
    host.add_hosts_entry(hosts)  # idempotent
    assert hosts.read_text().count(layout.HOSTS_MARK) == 1
    host.remove_hosts_entry(hosts)
    assert hosts.read_text() == "127.0.0.1 localhost\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts"]


def test_hosts_on_a_bind_mount_falls_back_to_an_in_place_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    ino = hosts.stat().st_ino

    def busy(src: object, dst: object) -> None:
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr("abtest.lab.files.os.replace", busy)
    assert files.replace_system_file(hosts, "127.0.0.1 localhost\n10.0.0.1 x\n") == "in place"
    assert hosts.read_text() == "127.0.0.1 localhost\n10.0.0.1 x\n"
    assert hosts.stat().st_ino == ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts"]  # temp file removed


def test_other_rename_errors_are_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("x\n")

    def denied(src: object, dst: object) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("abtest.lab.files.os.replace", denied)
    with pytest.raises(PermissionError):
        files.replace_system_file(hosts, "y\n")
    assert hosts.read_text() == "x\n"


def test_ip_forward_is_put_back_to_what_up_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    knob = tmp_path / "ip_forward"
    knob.write_text("0\n")
    monkeypatch.setattr(host, "IP_FORWARD", knob)
    assert host.set_ip_forward() == "0"
    assert knob.read_text() == "1\n"
    host.restore_ip_forward("0")
    assert knob.read_text() == "0\n"
    knob.write_text("1\n")
    host.restore_ip_forward("1")  # it was on before the lab: left on
    assert knob.read_text() == "1\n"


def test_cgroup_undo_removes_only_what_up_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "net_cls").mkdir()  # an empty mount point the host already had
    mounted: set[str] = set()

    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if argv[0] == "mount":
            mounted.add(argv[-1])
        elif argv[0] == "umount":
            mounted.discard(argv[-1])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr("abtest.lab.host.subprocess.run", fake_run)
    monkeypatch.setattr(host, "is_mount_point", lambda p: str(p) in mounted)
    names, made = host.mount_cgroups(root)
    assert names == list(host.CGROUP_CONTROLLERS)
    assert "net_cls" not in made and set(made) == set(host.CGROUP_CONTROLLERS) - {"net_cls"}
    assert host.unmount_cgroups(names, made, root) == []
    assert mounted == set()
    assert sorted(p.name for p in root.iterdir()) == ["net_cls"]


def test_a_cgroup_that_will_not_unmount_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cgroup"
    (root / "hugetlb").mkdir(parents=True)

    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 32, "", "target is busy")

    monkeypatch.setattr("abtest.lab.host.subprocess.run", fake_run)
    monkeypatch.setattr(host, "is_mount_point", lambda p: True)
    problems = host.unmount_cgroups(["hugetlb"], ["hugetlb"], root)
    assert problems and "target is busy" in problems[0]
    assert (root / "hugetlb").is_dir()


# --- item 7: the wait after SIGKILL has a deadline ---------------------------------------


def _started(script: str) -> subprocess.Popen[bytes]:
    """A child running `script`, once it says it is ready (exec'd, handlers installed):
    before that its cmdline is still ours and `alive(pid, expect)` would not match it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{script}; print('ok', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ok\n"
    return proc


def test_stop_gives_up_after_sigkill_with_a_deadline_and_says_what_it_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process that outlives SIGKILL (uninterruptible sleep) is simulated by signals that
    # are not delivered; the real process is ended by the test afterwards. Before the fix
    # this wait had no deadline at all.
    proc = _started("import time")
    try:
        (tmp_path / "stuck.pid").write_text(f"{proc.pid}\n")
        sent: list[int] = []
        monkeypatch.setattr(processes, "_signal", lambda pid, sig: sent.append(sig))
        with pytest.raises(LabError) as err:
            processes.stop("stuck", tmp_path, "time.sleep", timeout=0.2, kill_wait=0.5)
        msg = str(err.value)
        assert f"pid {proc.pid}" in msg and "after SIGKILL" in msg and "stuck" in msg
        assert sent == [signal.SIGTERM, signal.SIGKILL]
        assert (tmp_path / "stuck.pid").exists()  # kept so status still shows it
    finally:
        proc.kill()
        proc.wait()


def test_stop_ends_a_real_process_and_removes_its_pid_file(tmp_path: Path) -> None:
    proc = _started("import signal, time; signal.signal(15, signal.SIG_IGN)")
    try:
        (tmp_path / "stubborn.pid").write_text(f"{proc.pid}\n")
        assert processes.stop("stubborn", tmp_path, "time.sleep", timeout=0.3, kill_wait=10)
        assert not (tmp_path / "stubborn.pid").exists()
        assert not processes.alive(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_each_process_reads_every_process_and_passes_over_one_that_vanishes() -> None:
    # the shared walk of /proc (pids_of_uid, lab_processes, the shim search): this process is
    # among those read; a read that fails as for a process gone meanwhile (OSError) is skipped
    own = dict(processes.each_process(lambda entry: (entry / "stat").read_text()))
    assert os.getpid() in own
    assert own[os.getpid()].startswith(f"{os.getpid()} (")

    def vanished(entry: Path) -> str:
        if entry.name == str(os.getpid()):
            raise FileNotFoundError(entry / "stat")
        return entry.name

    seen = dict(processes.each_process(vanished))
    assert os.getpid() not in seen
    assert all(str(pid) == name for pid, name in seen.items())
    assert os.getpid() in processes.pids_of_uid(os.getuid())
