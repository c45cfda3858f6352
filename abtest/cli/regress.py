"""`abtest regress`: placeholder until its capability lands."""

from __future__ import annotations

from abtest.errors import NotBuiltError


def regress() -> None:
    """(not built yet)"""
    raise NotBuiltError("abtest regress has not landed yet", "abtest regress")
