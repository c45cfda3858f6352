"""Shared fixtures. Tests marked `lab` run against the real lab (`abtest lab up`):
they fail, never skip, when it is not up, so CI cannot pass without it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_server import PgServer, running_server

from abtest.config.playbook import NodeProfile, load_profile
from abtest.store.db import Store


@pytest.fixture(scope="session")
def lab_up() -> None:
    from abtest.lab.status import status

    st = status()
    if not (st.up and st.ready):
        down = [c.name for c in st.components if not c.healthy]
        pytest.fail(f"the lab is not up (unhealthy: {down}); run `abtest lab up` first")


@pytest.fixture(scope="session")
def lab_profile(lab_up: None) -> NodeProfile:
    return load_profile("lab")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server per test process (tests/pg_server.py); skips without binaries."""
    with running_server() as server:
        yield server


@pytest.fixture()
def pg_url(pg_server: PgServer) -> str:
    """The URL of a fresh, empty database on that server."""
    return pg_server.create_database()


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "results.sqlite")
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's results database."""
    if "ABTEST_DB" not in os.environ or not os.environ["ABTEST_DB"].startswith(str(tmp_path)):
        monkeypatch.setenv("ABTEST_DB", str(tmp_path / "abtest-results.sqlite"))
