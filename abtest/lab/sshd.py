"""The lab node's SSH door: a dedicated user, an sshd on 127.0.0.1, keys and known_hosts.

Like a real node: a plain login shell (root's rc files here cost ~350 ms a command),
passwordless sudo, a key the controller holds, a host key the controller must verify.
"""

from __future__ import annotations

import pwd
import subprocess
from pathlib import Path

from abtest.errors import LabError
from abtest.lab import layout
from abtest.lab.processes import run

SUDOERS = Path("/etc/sudoers.d/abtest-lab")


def ensure_user(paths: layout.Paths) -> None:
    home = paths.root / "home"
    try:
        pwd.getpwnam(layout.SSH_USER)
    except KeyError:
        run(["useradd", "--system", "--home-dir", str(home), "--shell", "/bin/sh", layout.SSH_USER])
    home.mkdir(mode=0o755, exist_ok=True)
    # "*" (not "!") so sshd without PAM does not treat the account as locked.
    run(["usermod", "-p", "*", layout.SSH_USER])
    SUDOERS.write_text(f"{layout.SSH_USER} ALL=(root) NOPASSWD: ALL\n")
    SUDOERS.chmod(0o440)


def ensure_keys(paths: layout.Paths) -> None:
    ssh = paths.ssh
    ssh.mkdir(mode=0o700, exist_ok=True)
    ssh.chmod(0o755)  # sshd (StrictModes) reads authorized_keys below it
    for name in ("host_ed25519", "client_ed25519"):
        key = ssh / name
        if not key.exists():
            run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"abtest-lab-{name}",
                    "-f",
                    str(key),
                ]
            )
    auth = ssh / "authorized_keys"
    auth.write_text((ssh / "client_ed25519.pub").read_text())
    auth.chmod(0o644)


def write_configs(paths: layout.Paths, port: int) -> Path:
    ssh = paths.ssh
    conf = ssh / "sshd_config"
    conf.write_text(
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
"""
    )
    host_pub = (ssh / "host_ed25519.pub").read_text().split()
    (ssh / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (ssh / "ssh_config").write_text(
        f"""# written by `abtest lab up`; used by playbooks/nodes/lab.yaml
Host {layout.SSH_ALIAS}
  HostName 127.0.0.1
  Port {port}
  User {layout.SSH_USER}
  IdentityFile {ssh / "client_ed25519"}
  UserKnownHostsFile {ssh / "known_hosts"}
  StrictHostKeyChecking yes
"""
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    check = subprocess.run(
        ["/usr/sbin/sshd", "-t", "-f", str(conf)], capture_output=True, text=True
    )
    if check.returncode != 0:
        raise LabError(f"sshd refused its config {conf}: {check.stderr.strip()}")
    return conf


def remove_sudoers() -> None:
    SUDOERS.unlink(missing_ok=True)
