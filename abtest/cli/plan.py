"""`abtest plan`: placeholder until its capability lands."""

from __future__ import annotations

from abtest.errors import NotBuiltError


def plan() -> None:
    """(not built yet)"""
    raise NotBuiltError("abtest plan has not landed yet", "abtest plan")
