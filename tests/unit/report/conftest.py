"""Fixtures of the report tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from abtest.store.db import Store


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One results database for a module's `model` fixture: a synthetic sweep's model takes
    about 4 s of CPU to build, and the tests that take it only read it (a ReportModel is
    frozen), so a module builds it once instead of once per test."""
    store = Store(tmp_path_factory.mktemp("report") / "results.sqlite")
    yield store
    store.close()
