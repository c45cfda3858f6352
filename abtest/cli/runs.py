"""`abtest runs`: placeholder until its capability lands."""

from __future__ import annotations

from abtest.errors import NotBuiltError


def runs() -> None:
    """(not built yet)"""
    raise NotBuiltError("abtest runs has not landed yet", "abtest runs")
