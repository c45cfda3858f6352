"""`abtest batch`: placeholder until its capability lands."""

from __future__ import annotations

from abtest.errors import NotBuiltError


def batch() -> None:
    """(not built yet)"""
    raise NotBuiltError("abtest batch has not landed yet", "abtest batch")
