"""A real PostgreSQL server for the tests: its own cluster (initdb) in a temp directory, on a
free loopback port, started with pg_ctl and torn down after. As root (CI) the server runs as
`nobody`, since PostgreSQL refuses to run as root. Tests that use it skip, saying why, only
when the server binaries (Debian package `postgresql`) are not installed."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "abtest"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL server's bin/ (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    return Path(found[-1]).parent if found else None


SKIP_REASON = (
    "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb): "
    "install the Debian package `postgresql` (scripts/bootstrap does)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "nobody", "--", *argv]


@dataclass
class PgServer:
    bin: Path
    root: Path
    port: int

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres", password: str | None = None) -> str:
        auth = f"{USER}:{password}" if password else USER
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A fresh, empty database of its own for one test; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: no shutdown checkpoint, every client cut at once,
        as a crash or an operator's fast stop does)."""
        self._ctl("-m", mode, "-w", "stop")

    def start(self) -> None:
        """Start it again (after :meth:`stop`), on the same port, and wait until it listens."""
        self._ctl("-o", self.options, "-w", "-t", "60", "-l", str(self.root / "log"), "start")
        _wait_listening(self.port)

    def _ctl(self, *args: str) -> None:
        argv = [str(self.bin / "pg_ctl"), "-D", str(self.data), *args]
        subprocess.run(_as_server_user(argv), check=True, capture_output=True, timeout=120)

    @property
    def options(self) -> str:
        return (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories="
            f"{self.root} -c fsync=off -c shared_buffers=16MB -c max_connections=40"
        )

    def terminate(self, pid: int) -> None:
        """Kill one backend (a controller's connection), as a server restart or a network
        cut would from the client's side."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            # waits (up to 5 s) until the backend is gone, so the next statement meets a dead
            # connection rather than racing the signal
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def running_server() -> Iterator[PgServer]:
    bindir = pg_bin()
    if bindir is None:
        pytest.skip(SKIP_REASON)
    root = Path(tempfile.mkdtemp(prefix="abtest-pg-"))
    server = PgServer(bindir, root, _free_port())
    if os.geteuid() == 0:
        shutil.chown(root, "nobody")

    def run(argv: list[str]) -> None:
        subprocess.run(_as_server_user(argv), check=True, capture_output=True, timeout=120)

    try:
        run([str(bindir / "initdb"), "-D", str(server.data), "-U", USER, "--auth=trust",
             "--no-sync", "-E", "UTF8", "--locale=C"])  # fmt: skip
        server.start()
        yield server
    finally:
        if (server.data / "postmaster.pid").exists():
            subprocess.run(
                _as_server_user(
                    [
                        str(bindir / "pg_ctl"),
                        "-D",
                        str(server.data),
                        "-m",
                        "immediate",
                        "-w",
                        "stop",
                    ]
                ),
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)
