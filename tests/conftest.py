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


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One results database for a module's read-only fixtures (the report tests' `model`): a
    synthetic sweep's model takes about 4 s of CPU to build, and the tests that take it only
    read it (a ReportModel is frozen), so a module builds it once instead of once per test."""
    store = Store(tmp_path_factory.mktemp("module") / "results.sqlite")
    yield store
    store.close()


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's results database."""
    if "ABTEST_DB" not in os.environ or not os.environ["ABTEST_DB"].startswith(str(tmp_path)):
        monkeypatch.setenv("ABTEST_DB", str(tmp_path / "abtest-results.sqlite"))


# CI's table of where its time went (.ci/run, scripts/ci-times): each lab test file's time,
# setup and teardown included, appended to $ABTEST_TIMINGS when it is set. The lab tests run
# in one process, one at a time, so a file's sum is its share of the wall clock.
_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("ABTEST_TIMINGS") and "lab" in report.keywords:
        where = report.nodeid.split("::", 1)[0]
        _file_seconds[where] = _file_seconds.get(where, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("ABTEST_TIMINGS")
    if not path or not _file_seconds or hasattr(session.config, "workerinput"):
        return
    with open(path, "a", encoding="utf-8") as out:
        for where, seconds in _file_seconds.items():
            out.write(f"lab test\t{where}\t{seconds:.1f}\n")


# The lab tests that need a kubelet build or the systemd node's image run last, in the order
# scripts/prefetch-builds builds them: on a machine with nothing cached those builds run in the
# background while the other lab tests run (about 20 min of them), and a test that asks for a
# build still in progress waits for it under the cache's build lock. Keep the two lists in step.
_BUILD_USERS = (
    "tests/lab/lab/test_systemd_node_lab.py",  # the image; v1.36.3+agc
    "tests/lab/node/test_bisect_kill_lab.py",  # the two bisect-demo prefixes
    "tests/lab/node/test_kubelet_builds_lab.py",  # v1.35.4
    "tests/lab/node/test_patched_kubelet_lab.py",  # v1.36.3+agc with its Go tests
)


# The unit tier's longest tests (one 2-core run's --durations) start first: the two xdist
# workers then end together, instead of one running the 50 s wheel test (collected last, as
# tests/unit/test_*.py come after the folders) while the other waits.
_SLOW_UNITS_FIRST = (
    "tests/unit/test_packaging.py",  # its `slow` install, in the full tier
    "tests/unit/test_docs_commands.py",
    "tests/unit/report/test_report_twoway.py",
    "tests/unit/stats/test_stats_phases.py",
    "tests/unit/store/test_store_postgres.py",
    "tests/unit/stats/test_regress_plan_calibration.py",
    "tests/unit/cli/test_startup_imports.py",
    "tests/unit/stats/test_stats_power.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def order(item: pytest.Item) -> int:
        where = item.nodeid.split("::", 1)[0]
        if where in _SLOW_UNITS_FIRST:
            return -1
        return _BUILD_USERS.index(where) + 1 if where in _BUILD_USERS else 0

    items.sort(key=order)  # stable: every other test keeps its place
