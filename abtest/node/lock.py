"""The node lock: one file on the node saying who is experimenting on it.

The file is created exclusively (``set -C``), holds JSON naming the holder (user@host),
the controller host, pid, the pid's start time (so a reused pid is not mistaken for the
holder), when it was taken, for what, and a random token. The token also goes into the
journal entry of the change it protects, so ``abtest node restore`` can take over the lock
of the change it is undoing. Any other held lock is refused; a lock whose holder is gone
(stale) is only broken with an explicit ``break_lock``, and never while its holder is seen
running on this host.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from abtest.config.json_object import json_object
from abtest.errors import NodeError, NodeLockedError
from abtest.node.connection import Connection

_CREATE_SCRIPT = r"""
set -eu
mkdir -p -- "$(dirname -- "$1")"
set -C
cat > "$1"
"""
# mktemp, not "$1.$$.tmp": a predictable name in the lock's folder could be planted (a
# symlink) by anyone who can write there; mktemp creates a fresh 0600 file or fails
_REPLACE_SCRIPT = r"""
set -eu
tmp=$(mktemp -- "$1.XXXXXXXXXX")
trap 'rm -f -- "$tmp"' EXIT
cat > "$tmp"
chmod 644 "$tmp"
mv -f -- "$tmp" "$1"
"""


@dataclass(frozen=True)
class LockInfo:
    holder: str
    host: str
    pid: int
    pid_start: str | None
    started_at: str
    purpose: str
    token: str
    #: "held": the holder is working; "kept": it exited, leaving a change in effect
    state: str = "held"
    #: a kept lock's claim: the kubelet settings it says are in effect (``node check`` compares
    #: them with the running kubelet); None when it claims none or names none
    claim: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LockInfo:
        data = json_object(text)
        if data is None:
            return cls("?", "?", 0, None, "?", f"unreadable lock: {text[:80]!r}", "")
        return cls(
            holder=str(data.get("holder", "?")),
            host=str(data.get("host", "?")),
            pid=int(data.get("pid") or 0),
            pid_start=data.get("pid_start"),
            started_at=str(data.get("started_at", "?")),
            purpose=str(data.get("purpose", "")),
            token=str(data.get("token", "")),
            state=str(data.get("state", "held")),
            claim=data["claim"] if isinstance(data.get("claim"), dict) else None,
        )

    def holder_alive(self) -> bool | None:
        """True/False when the holder runs on this host; None when it cannot be known."""
        if self.host != socket.gethostname() or self.pid <= 0:
            return None
        if not Path(f"/proc/{self.pid}").exists():
            return False
        if self.pid_start is None:
            return True
        return process_start(self.pid) == self.pid_start

    def describe(self) -> str:
        if self.state == "kept":
            kept = "kept for a change in effect"
            return f"{self.holder} since {self.started_at}, {kept}: {self.purpose}"
        alive = self.holder_alive()
        state = {True: "running", False: "not running: stale", None: "elsewhere"}[alive]
        text = f"{self.holder} pid {self.pid} ({state}) since {self.started_at}"
        return f"{text}, for: {self.purpose}" if self.purpose else text


def process_start(pid: int) -> str | None:
    """The start time of a local process (clock ticks since boot), to tell reused pids apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def new_info(purpose: str) -> LockInfo:
    host = socket.gethostname()
    pid = os.getpid()
    return LockInfo(
        holder=f"{getpass.getuser()}@{host}",
        host=host,
        pid=pid,
        pid_start=process_start(pid),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        purpose=purpose,
        token=secrets.token_hex(8),
    )


class NodeLock:
    """The lock file at ``path`` on the node behind ``conn``."""

    def __init__(
        self, conn: Connection, path: str, *, sudo: bool, profile_name: str | None = None
    ) -> None:
        self.conn = conn
        self.path = path
        self.sudo = sudo
        self.held: LockInfo | None = None
        #: named in the command a refusal gives (``abtest node restore --profile NAME``)
        self.restore_command = "abtest node restore" + (
            f" --profile {profile_name}" if profile_name else ""
        )

    def read(self) -> LockInfo | None:
        script = '[ -e "$1" ] || exit 3; cat -- "$1"'
        argv = ["sh", "-c", script, "abtest-lock", self.path]
        res = self.conn.run(argv, sudo=self.sudo, timeout=20)
        if res.rc == 3:
            return None
        res.check(f"reading the node lock {self.path}")
        return LockInfo.from_json(res.stdout)

    def acquire(
        self,
        purpose: str,
        *,
        break_lock: bool = False,
        takeover_token: str | None = None,
        reclaim_dead: bool = False,
    ) -> LockInfo:
        """Take the lock, or raise NodeLockedError naming who holds it.

        ``takeover_token``: a lock with this token is ours to take over (the journal entry
        being restored names it). ``break_lock``: replace a stale lock. ``reclaim_dead``: a
        lock whose holder is known gone (a process of this host that no longer runs) is taken
        over: ``abtest node restore`` is the command a refusal names for it.
        """
        info = new_info(purpose)
        argv = ["sh", "-c", _CREATE_SCRIPT, "abtest-lock", self.path]
        res = self.conn.run(argv, sudo=self.sudo, timeout=20, stdin=info.to_json().encode())
        if res.ok:
            self.held = info
            return info
        existing = self.read()
        if existing is None:
            res.check(f"creating the node lock {self.path}")
            raise NodeError(f"could not create the node lock {self.path}")  # pragma: no cover
        if takeover_token and existing.token == takeover_token:
            if existing.holder_alive() and existing.pid != os.getpid():
                raise NodeLockedError(
                    f"node lock {self.path} is held by {existing.describe()}, which is still "
                    "running: let it finish (it restores the node itself), or stop it first"
                )
            info = replace(info, token=existing.token)
        elif reclaim_dead and existing.holder_alive() is False:
            pass  # its holder is gone from this host: nobody else can be relying on it
        elif break_lock:
            if existing.holder_alive():
                raise NodeLockedError(
                    f"node lock {self.path} is held by {existing.describe()}; its holder is "
                    "running, so --break-lock does not apply (stop it, or wait)"
                )
        else:
            if existing.state == "kept":
                hint = f"undo that change with `{self.restore_command}` first"
            elif existing.holder_alive() is False:
                hint = (
                    f"its holder is gone from this host: `{self.restore_command}` puts back "
                    "anything it left and frees the lock"
                )
            else:
                hint = "wait for it, or pass --break-lock if you know it is stale"
            held_by = existing.describe()
            raise NodeLockedError(f"node lock {self.path} is held by {held_by} ({hint})")
        self._replace(info)
        self.held = info
        return info

    def keep(self, purpose: str, claim: dict[str, Any] | None = None) -> None:
        """Leave the lock on the node after this process exits (a change stays in effect);
        ``claim``: the settings that change put in effect."""
        if self.held is not None:
            self.held = replace(self.held, purpose=purpose, state="kept", claim=claim)
            self._replace(self.held)

    def _replace(self, info: LockInfo) -> None:
        argv = ["sh", "-c", _REPLACE_SCRIPT, "abtest-lock", self.path]
        res = self.conn.run(argv, sudo=self.sudo, timeout=20, stdin=info.to_json().encode())
        res.check(f"writing the node lock {self.path}")

    def release(self) -> bool:
        """Remove the lock if it is still ours; False if someone else holds it now."""
        if self.held is None:
            return False
        current = self.read()
        if current is not None and current.token != self.held.token:
            self.held = None
            return False
        if current is not None:
            self.conn.run(["rm", "-f", "--", self.path], sudo=self.sudo, timeout=20).check(
                f"removing the node lock {self.path}"
            )
        self.held = None
        return True
