"""What node code asks of a connection to a node: :class:`Connection`, a protocol.

:class:`abtest.node.ssh.Connection` (paramiko) is the real one; a test passes a fake
(:class:`abtest.testing.FakeConnection` runs the commands on this machine). Every node module
that takes a connection is typed against this protocol, so nothing above the SSH seam needs
paramiko. Its commands half, :class:`Commands`, is written once: each connection class
subclasses it and supplies only ``execute``. :class:`Result` (one command's outcome) and
:class:`FileStat` (one file's owner, mode and size) are what a connection answers.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol

from abtest.errors import NodeError

#: a command's time limit when its caller names none (seconds)
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Result:
    """What one remote command did. ``stdout_bytes`` is the raw output."""

    command: str
    rc: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def check(self, what: str) -> Result:
        """Self if the command succeeded, else a NodeError saying what failed and why."""
        if self.rc != 0:
            detail = (self.stderr.strip() or self.stdout.strip())[-600:]
            raise NodeError(f"{what} failed (exit {self.rc}): {detail or 'no output'}")
        return self


@dataclass(frozen=True)
class FileStat:
    size: int
    mode: int  # permission bits only (e.g. 0o644)
    uid: int
    gid: int


class Endpoint(Protocol):
    """Where a connection goes, as far as messages name it."""

    @property
    def alias(self) -> str: ...

    def describe(self) -> str: ...


class Commands(Protocol):
    """How a connection runs commands, written once: a connection class subclasses this and
    supplies :meth:`execute`; :meth:`run` checks the argv here (never shell syntax) and
    :meth:`run_shell` runs a trusted line as ``sh -c``, the line itself what messages show."""

    def run(
        self,
        argv: list[str],
        *,
        sudo: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
        stdin: bytes | None = None,
    ) -> Result:
        """Run one program with arguments (each one quoted: never shell syntax)."""
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
        if any("\x00" in a for a in argv):
            raise ValueError("an argument contains a NUL byte")
        return self.execute(argv, shlex.join(argv), sudo=sudo, timeout=timeout, stdin=stdin)

    def run_shell(
        self,
        command: str,
        *,
        sudo: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
        stdin: bytes | None = None,
    ) -> Result:
        """Run a trusted command line (the profile's own) through ``sh -c``."""
        argv = ["sh", "-c", command]
        return self.execute(argv, command, sudo=sudo, timeout=timeout, stdin=stdin)

    def execute(
        self, argv: list[str], shown: str, *, sudo: bool, timeout: float, stdin: bytes | None
    ) -> Result:
        """Run ``argv`` (checked, or ``sh -c`` and a trusted line); ``shown`` names it."""
        raise NotImplementedError


class Connection(Commands, Protocol):
    """A connection to one node: argv commands and trusted shell lines (:class:`Commands`),
    files."""

    @property
    def endpoint(self) -> Endpoint: ...

    @property
    def connected(self) -> bool:
        """True while an open connection is known to be alive (no probe)."""
        ...

    def read_bytes(self, path: str, *, sudo: bool = False) -> bytes: ...

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write a file the connection's user may write (no sudo)."""
        ...

    def stat(self, path: str) -> FileStat | None:
        """Owner, mode and size of ``path`` (following symlinks); None if it does not exist."""
        ...

    def reconnect(self) -> None:
        """Drop the connection (e.g. after an interrupted transfer); the next use reopens."""
        ...

    def close(self) -> None: ...
