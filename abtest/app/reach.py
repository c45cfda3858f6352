"""How a live command reaches its nodes and where it keeps what it measured: the options
regress, bisect and gates share (--accept-new-host-key, --kubeconfig, --context, --db)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store (pandas) only where a command opens it: not for `gates --list`
    from abtest.store.db import DbTarget


@dataclass(frozen=True)
class Reach:
    """None (False) is an option not given: the profile's kubeconfig and context, the default
    database, a node's host key only if already known."""

    accept_new_host_key: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    db: DbTarget = None
