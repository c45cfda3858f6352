"""The lab node's SSH door: a dedicated user, an sshd on 127.0.0.1, keys and known_hosts.

Like a real node: a plain login shell (root's rc files here cost ~350 ms a command),
passwordless sudo, a key the controller holds, a host key the controller must verify.

The door exists only while the lab is up: `up` creates the user and its sudoers file,
`down` removes both (close_door), so a machine with the lab down has no passwordless-root
account. The state directory is 0700 except that the lab user's group may traverse (0710)
the two directories on the way to its authorized_keys, which sshd reads as that user.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from abtest.errors import LabError
from abtest.lab import layout
from abtest.lab.files import PRIVATE_DIR, PRIVATE_FILE, PUBLIC_FILE, make_dir, write_file
from abtest.lab.processes import alive, pids_of_uid, run

SUDOERS = Path("/etc/sudoers.d/abtest-lab")
DOOR_MODE = 0o710
SESSION_STOP_S = 5.0


def lab_user(paths: layout.Paths) -> pwd.struct_passwd | None:
    """The lab's SSH user, if it exists and is the lab's (its home is the lab's)."""
    try:
        pw = pwd.getpwnam(layout.SSH_USER)
    except KeyError:
        return None
    return pw if pw.pw_dir == str(paths.home) else None


def ensure_user(paths: layout.Paths) -> None:
    try:
        pwd.getpwnam(layout.SSH_USER)
    except KeyError:
        run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--home-dir",
                str(paths.home),
                "--shell",
                "/bin/sh",
                layout.SSH_USER,
            ]
        )
    pw = lab_user(paths)
    if pw is None:
        # Someone else's account: giving it passwordless sudo would be a takeover.
        raise LabError(
            f"a user {layout.SSH_USER!r} exists that the lab did not create (its home is "
            f"{pwd.getpwnam(layout.SSH_USER).pw_dir}, not {paths.home}); the lab will not give "
            "it passwordless sudo: remove or rename that user"
        )
    make_dir(paths.home)
    os.chown(paths.home, pw.pw_uid, pw.pw_gid)
    # "*" (not "!") so sshd without PAM does not treat the account as locked.
    run(["usermod", "-p", "*", layout.SSH_USER])
    # A name with a dot is ignored by sudo's includedir, so the temp file is never live.
    write_file(SUDOERS, f"{layout.SSH_USER} ALL=(root) NOPASSWD: ALL\n", 0o440)


def open_door(paths: layout.Paths) -> None:
    """Let (only) the lab user's group traverse to its authorized_keys: sshd opens that
    file as the user. Called last in `up`, after every directory was made 0700."""
    pw = lab_user(paths)
    if pw is None:
        raise LabError(f"the lab user {layout.SSH_USER!r} is missing (ensure_user runs first)")
    for d in (paths.root, paths.ssh):
        os.chown(d, 0, pw.pw_gid)
        os.chmod(d, DOOR_MODE)


def close_door(paths: layout.Paths) -> list[str]:
    """Remove the sudoers file and the lab user (ending its SSH sessions first: userdel
    refuses a user with processes). Returns what could not be removed, one line each."""
    problems: list[str] = []
    SUDOERS.unlink(missing_ok=True)
    pw = lab_user(paths)
    if pw is not None:
        problems += _end_sessions(pw.pw_uid)
        proc = subprocess.run(["userdel", layout.SSH_USER], capture_output=True, text=True)
        if proc.returncode != 0:
            problems.append(f"user {layout.SSH_USER}: userdel failed: {proc.stderr.strip()}")
    for d in (paths.root, paths.ssh, paths.home):
        if d.is_dir():
            os.chown(d, 0, 0)
            os.chmod(d, PRIVATE_DIR)
    return problems


def _end_sessions(uid: int) -> list[str]:
    """SIGTERM, then SIGKILL, the processes running as the lab user: by construction these
    are sessions through the lab's sshd (the listener itself is stopped by then)."""
    for sig, wait in ((signal.SIGTERM, SESSION_STOP_S), (signal.SIGKILL, SESSION_STOP_S)):
        pids = pids_of_uid(uid)
        if not pids:
            return []
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
    left = [p for p in pids_of_uid(uid) if alive(p)]
    if not left:
        return []
    return [
        f"user {layout.SSH_USER}: processes {left} still running {SESSION_STOP_S:.0f} s "
        "after SIGKILL"
    ]


def ensure_key_pairs(directory: Path, comment: str) -> None:
    """The host and client ed25519 key pairs in ``directory`` (``host_ed25519``,
    ``client_ed25519`` and their .pub), made once, commented ``COMMENT-NAME``."""
    for name in ("host_ed25519", "client_ed25519"):
        key = directory / name
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{comment}-{name}",
                 "-f", str(key)])  # fmt: skip


def ensure_keys(paths: layout.Paths) -> None:
    ssh = paths.ssh
    ensure_key_pairs(ssh, "abtest-lab")
    write_file(ssh / "authorized_keys", (ssh / "client_ed25519.pub").read_text(), PUBLIC_FILE)


def write_configs(paths: layout.Paths, port: int) -> Path:
    ssh = paths.ssh
    conf = ssh / "sshd_config"
    write_file(
        conf,
        f"""# written by `abtest lab up`
ListenAddress 127.0.0.1
Port {port}
HostKey {ssh / "host_ed25519"}
PidFile {paths.run / "sshd.pid"}
AuthorizedKeysFile {ssh / "authorized_keys"}
AllowUsers {layout.SSH_USER}
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UsePAM no
StrictModes yes
Subsystem sftp internal-sftp
""",
        PRIVATE_FILE,
    )
    host_pub = (ssh / "host_ed25519.pub").read_text().split()
    write_file(
        ssh / "known_hosts", f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n", PUBLIC_FILE
    )
    write_file(
        ssh / "ssh_config",
        f"""# written by `abtest lab up`; used by playbooks/nodes/lab.yaml
Host {layout.SSH_ALIAS}
  HostName 127.0.0.1
  Port {port}
  User {layout.SSH_USER}
  IdentityFile {ssh / "client_ed25519"}
  UserKnownHostsFile {ssh / "known_hosts"}
  StrictHostKeyChecking yes
""",
        PUBLIC_FILE,
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    check = subprocess.run(
        ["/usr/sbin/sshd", "-t", "-f", str(conf)], capture_output=True, text=True
    )
    if check.returncode != 0:
        raise LabError(f"sshd refused its config {conf}: {check.stderr.strip()}")
    return conf
