"""`abtest report`: placeholder until its capability lands."""

from __future__ import annotations

from abtest.errors import NotBuiltError


def report() -> None:
    """(not built yet)"""
    raise NotBuiltError("abtest report has not landed yet", "abtest report")
