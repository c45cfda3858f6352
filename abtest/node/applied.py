"""Settings in effect for the length of a ``with`` block, the node restored after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from abtest.config.domain import Scalar
from abtest.config.playbook import NodeProfile
from abtest.node.control import NodeController
from abtest.node.records import ApplyRecord
from abtest.store.db import Store


@contextmanager
def applied(
    profile: NodeProfile,
    settings: Mapping[str, Scalar],
    *,
    store: Store,
    timeout: float | None = None,
    accept_new_host_key: bool = False,
    break_lock: bool = False,
    check_known: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Iterator[ApplyRecord]:
    """Apply ``settings`` for the ``with`` block; restore on exit, error, SIGINT/SIGTERM.

    Yields the :class:`ApplyRecord` (restart-to-healthz/Ready/verified seconds and the
    verified values); its ``restore`` field holds the restore's record after the block.
    """
    with NodeController(
        profile,
        store,
        timeout=timeout,
        accept_new_host_key=accept_new_host_key,
        break_lock=break_lock,
        progress=progress,
    ) as ctl:
        record = ctl.apply(settings, check_known=check_known)
        try:
            yield record
        finally:
            with ctl.guard.shield():
                if ctl.journal.pending(ctl.node) is not None:
                    record.restore = ctl.restore()
