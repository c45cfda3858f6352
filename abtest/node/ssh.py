"""SSH to a node: with :mod:`abtest.node.ssh_config`, the only code that imports paramiko.

:class:`Connection` is a lazy, context-managed connection in the spirit of fabric's: it
connects on first use to the endpoint :func:`~abtest.node.ssh_config.resolve` made of the
profile's alias (ssh config or ``~/.ssh/config``), through its ProxyJump hosts (a
``direct-tcpip`` channel of each hop's own verified connection) or its ProxyCommand,
authenticates with a key file or the agent, and verifies every host key - the target's and
each jump host's - against every known-hosts file OpenSSH would read plus the profile's. An
unknown, changed or ``@revoked`` key is a :class:`~abtest.errors.HostKeyError`.
``accept_new_host_key=True`` accepts (and records) a key for a host that has none yet; a
*changed* key is never accepted.

Commands are argument vectors (:meth:`Connection.run`): every argument is quoted with
:func:`shlex.quote`, so a value can never become shell syntax. The profile's own commands
(restart, log, crictl ...) are trusted text and run with :meth:`Connection.run_shell`.
Files travel by SFTP. Nothing secret (key material, file contents) is logged.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
import stat as stat_module
import time
from pathlib import Path
from typing import Any, cast

import paramiko

from abtest.config.full_match import whole
from abtest.config.playbook import SSHTarget
from abtest.errors import HostKeyError, NodeError
from abtest.node.connection import Commands, FileStat, Result
from abtest.node.ssh_config import Endpoint, load_known_hosts, resolve
from abtest.process.closing import Closing

log = logging.getLogger(__name__)

KEEPALIVE_S = 15
_CHUNK = 1 << 16
_EOF_GRACE_S = 2.0


# what a known_hosts line may name: a host or address, or [host]:port (no wildcard, negation,
# hash marker, comma, space or line break)
_KNOWN_HOSTS_NAME = re.compile(r"(\[[A-Za-z0-9_.:-]+\]:[0-9]{1,5}|[A-Za-z0-9_.:-]+)")
# paramiko logs a failed transport (a ProxyCommand that exits) with its traceback; the same
# failure reaches us as an exception and becomes one line, so its log stays out of stderr
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Reject unknown keys (HostKeyError), or record them when explicitly allowed."""

    def __init__(self, endpoint: Endpoint, accept_new: bool) -> None:
        self.endpoint = endpoint
        self.accept_new = accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        fingerprint = key.fingerprint if hasattr(key, "fingerprint") else "?"
        if not self.accept_new:
            files = ", ".join(self.endpoint.known_hosts_files or (self.endpoint.known_hosts,))
            raise HostKeyError(
                f"host key of {hostname} ({key.get_name()} {fingerprint}) is not in "
                f"{files}; verify it and add it, or pass "
                "--accept-new-host-key to trust it on first use"
            )
        if not whole(_KNOWN_HOSTS_NAME, hostname):
            # a newline, space or pattern character would let the name write its own lines
            # (a `* <key>` line trusts that key for every host): never written
            raise HostKeyError(
                f"refusing to record a host key under the name {hostname!r}: not a plain "
                "host name or [host]:port"
            )
        path = Path(self.endpoint.known_hosts)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with path.open("a", encoding="ascii") as fh:
            fh.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.warning("accepted new host key for %s (%s) into %s", hostname, fingerprint, path)


class Connection(Commands, Closing):
    """A lazy SSH connection to one node (connects on first use; ``with`` closes it)."""

    def __init__(
        self,
        target: SSHTarget,
        *,
        accept_new_host_key: bool = False,
        connect_timeout: float = 15.0,
    ) -> None:
        self.target = target
        self.accept_new_host_key = accept_new_host_key
        self.connect_timeout = connect_timeout
        self.endpoint = resolve(target)
        self._client: paramiko.SSHClient | None = None
        self._jump_clients: list[paramiko.SSHClient] = []  # ProxyJump hops, outermost first
        self._sftp: paramiko.SFTPClient | None = None

    # --- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):  # closing a dead channel is not news
                self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None
        while self._jump_clients:  # innermost hop first
            self._jump_clients.pop().close()

    def reconnect(self) -> None:
        """Drop the connection (e.g. after an interrupted transfer); the next use reopens."""
        self.close()

    @property
    def connected(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return bool(transport and transport.is_active())

    def open(self) -> paramiko.SSHClient:
        if self._client is not None and self.connected:
            return self._client
        self.close()
        self._client = self._open_path(self.endpoint)
        return self._client

    def _open_path(self, ep: Endpoint) -> paramiko.SSHClient:
        """Connect to ``ep``, through its jump hosts (each verified like the target) or its
        ProxyCommand. Jump clients are kept for :meth:`close`."""
        sock: Any = None
        if ep.jumps:
            hop = self._open_path(ep.jumps[0])
            for nxt in ep.jumps[1:]:
                hop = self._connect(nxt, self._tunnel(hop, nxt))
            sock = self._tunnel(hop, ep)
        elif ep.proxy_command:
            try:
                sock = paramiko.ProxyCommand(ep.proxy_command)
            except (paramiko.SSHException, OSError) as exc:
                raise NodeError(f"ssh {ep.describe()}: ProxyCommand failed ({exc})") from None
        return self._connect(ep, sock)

    def _tunnel(self, via: paramiko.SSHClient, to: Endpoint) -> paramiko.Channel:
        """A ``direct-tcpip`` channel from the jump host ``via`` to ``to``."""
        self._jump_clients.append(via)
        transport = via.get_transport()
        if transport is None:
            raise NodeError(f"ssh {to.describe()}: the jump host's connection is gone")
        try:
            return transport.open_channel(
                "direct-tcpip",
                (to.hostname, to.port),
                ("127.0.0.1", 0),
                timeout=self.connect_timeout,
            )
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise NodeError(
                f"ssh {to.describe()}: the jump host cannot reach {to.hostname}:{to.port} ({exc})"
            ) from None

    def _connect(self, ep: Endpoint, sock: Any) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        known = load_known_hosts(ep.known_hosts_files or (ep.known_hosts,), client.get_host_keys())
        client.set_missing_host_key_policy(_HostKeyPolicy(ep, self.accept_new_host_key))
        log.debug("ssh connect %s (alias %s)", ep.describe(), ep.alias)
        try:
            client.connect(
                ep.hostname,
                port=ep.port,
                username=ep.user,
                key_filename=cast(Any, list(ep.key_files) or None),
                allow_agent=ep.use_agent,
                look_for_keys=not ep.key_files,
                timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout,
                sock=sock,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(
                f"host key of {ep.host_key_name} CHANGED: the server offered "
                f"{exc.key.get_name()} {exc.key.fingerprint}, "
                f"{', '.join(known.files)} have {exc.expected_key.fingerprint}; refusing to "
                "connect (fix known_hosts only after verifying the new key out of band)"
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise NodeError(f"ssh {ep.describe()}: authentication failed ({exc})") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            raise NodeError(f"ssh {ep.describe()}: cannot connect ({exc})") from None
        transport = client.get_transport()
        server_key = transport.get_remote_server_key() if transport is not None else None
        if server_key is not None and known.is_revoked(ep.host_key_name, server_key):
            client.close()
            raise HostKeyError(
                f"host key of {ep.host_key_name} ({server_key.get_name()} "
                f"{server_key.fingerprint}) is marked @revoked in {', '.join(known.files)}; "
                "refusing to connect"
            )
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
        return client

    # --- commands ---------------------------------------------------------------------

    def execute(
        self, argv: list[str], shown: str, *, sudo: bool, timeout: float, stdin: bytes | None
    ) -> Result:
        """One command line: every argument shell-quoted, behind ``sudo -n`` if asked."""
        command = shlex.join(argv)
        if sudo:
            command = "sudo -n -- " + command
        return self._exec(command, timeout, stdin)

    def _exec(self, command: str, timeout: float, stdin: bytes | None) -> Result:
        client = self.open()
        transport = client.get_transport()
        if transport is None:
            raise NodeError(f"ssh {self.endpoint.describe()}: no transport")
        log.debug("ssh %s: %s", self.endpoint.alias, command)
        try:
            chan = transport.open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            where = self.endpoint.describe()
            raise NodeError(f"ssh {where}: cannot open a channel ({exc})") from None
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            exited_at = 0.0
            while True:
                busy = False
                while chan.recv_ready():
                    out += chan.recv(_CHUNK)
                    busy = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(_CHUNK)
                    busy = True
                if chan.exit_status_ready() and not busy:
                    # a daemon started by the command may keep its output open: do not
                    # wait for EOF for more than a moment after the exit status is in
                    exited_at = exited_at or time.monotonic()
                    if chan.eof_received or time.monotonic() - exited_at > _EOF_GRACE_S:
                        break
                if time.monotonic() > deadline:
                    raise NodeError(
                        f"ssh {self.endpoint.alias}: command timed out after {timeout:.0f} s: "
                        f"{_short(command)}"
                    )
                if not busy:
                    time.sleep(0.005)
            rc = chan.recv_exit_status()
            while chan.recv_ready():
                out += chan.recv(_CHUNK)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(_CHUNK)
        except (TimeoutError, paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise NodeError(f"ssh {self.endpoint.alias}: {_short(command)}: {exc}") from None
        finally:
            chan.close()
        raw = bytes(out)
        return Result(
            command=command,
            rc=rc,
            stdout=raw.decode("utf-8", errors="replace"),
            stderr=bytes(err).decode("utf-8", errors="replace"),
            stdout_bytes=raw,
        )

    # --- files ------------------------------------------------------------------------

    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None or not self.connected:
            try:
                self._sftp = self.open().open_sftp()
            except (paramiko.SSHException, OSError, EOFError) as exc:
                self.close()
                raise NodeError(f"ssh {self.endpoint.alias}: cannot start SFTP ({exc})") from None
        return self._sftp

    def read_bytes(self, path: str, *, sudo: bool = False) -> bytes:
        """A file's bytes by SFTP; through ``sudo cat`` if SFTP may not read it."""
        try:
            with self.sftp.open(path, "rb") as fh:
                return bytes(fh.read())
        except PermissionError:
            if not sudo:
                raise NodeError(f"{self.endpoint.alias}:{path}: permission denied") from None
        except FileNotFoundError:
            raise NodeError(f"{self.endpoint.alias}:{path}: no such file") from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            self.close()
            raise NodeError(f"{self.endpoint.alias}:{path}: cannot read ({exc})") from None
        res = self.run(["cat", "--", path], sudo=True).check(f"reading {path}")
        return res.stdout_bytes

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write a file the SSH user may write (no sudo): create/truncate, then chmod."""
        try:
            with self.sftp.open(path, "wb") as fh:
                fh.set_pipelined(True)
                fh.write(data)
            self.sftp.chmod(path, mode)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            if not isinstance(exc, PermissionError | FileNotFoundError):
                self.close()
            raise NodeError(f"{self.endpoint.alias}:{path}: cannot write ({exc})") from None

    def stat(self, path: str) -> FileStat | None:
        """Owner, mode and size of ``path`` (following symlinks); None if it does not exist."""
        try:
            st = self.sftp.stat(path)
        except FileNotFoundError:
            return None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise NodeError(f"{self.endpoint.alias}:{path}: cannot stat ({exc})") from None
        return FileStat(
            size=int(st.st_size or 0),
            mode=stat_module.S_IMODE(st.st_mode or 0),
            uid=int(st.st_uid or 0),
            gid=int(st.st_gid or 0),
        )


def _short(command: str, limit: int = 160) -> str:
    return command if len(command) <= limit else command[: limit - 3] + "..."
