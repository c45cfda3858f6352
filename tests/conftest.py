"""Shared fixtures. Tests marked `lab` run against the real lab (`abtest lab up`):
they fail, never skip, when it is not up, so CI cannot pass without it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

# Tests live by package (tests/unit/<pkg>/, tests/lab/<pkg>/) and a few share builders across
# folders (``from test_report_model import build_sweep``): every test folder is importable,
# whichever test a worker collects first.
for _folder in sorted(Path(__file__).parent.glob("*/**/")):
    if "fixtures" not in _folder.parts and any(_folder.glob("test_*.py")):
        sys.path.insert(1, str(_folder))

import pytest  # noqa: E402
from pg_server import PgServer, running_server  # noqa: E402

from abtest.config.playbook import NodeProfile, load_profile  # noqa: E402
from abtest.store.db import Store  # noqa: E402


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
