"""What one apply will do, decided before anything on the node changes.

:func:`plan_apply` is the pure middle of :meth:`NodeController.apply
<abtest.node.control.NodeController.apply>`: from the config file as read, the original
(the file's bytes before our first apply, or the journal's copy) and the running kubelet's
view it computes the new bytes, the values the restarted kubelet must show, and what the
journal and the node-side marker record - so the controller only reads, writes, restarts
and undoes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from abtest.config.domain import Scalar
from abtest.node import kubelet_config as kc
from abtest.node import remote_files as rf
from abtest.node.health import (
    Expectation,
    HealthReport,
    compare,
    original_expectations,
    running_values,
)
from abtest.node.records import ApplyRecord, text_of
from abtest.node.remote_files import Marker
from abtest.store.journal import JournalEntry


def checked_settings(settings: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """Each value checked for its path, each path's shape checked: before any lock or read."""
    checked = {p: kc.check_value(p, v) for p, v in settings.items()}
    for path in checked:
        kc.split_path(path)
    return checked


@dataclass
class ApplyPlan:
    """The new config and what proves it in effect; ``record`` is returned to the caller."""

    record: ApplyRecord
    new: bytes
    new_text: str
    expectations: list[Expectation]
    applied: dict[str, Any]  # the journal entry's ``applied`` (what to undo, which bytes)
    marker: str  # beside the node-side backup: which bytes are ours

    def record_if_in_effect(self, config: Mapping[str, Any], gates: Mapping[str, bool]) -> bool:
        """Every expected value already shows in the running kubelet; if so, the record
        keeps what was compared (no restart, so no restart times) as its evidence."""
        seen, problems = compare(self.expectations, config, gates)
        if not problems:
            self.record.health = HealthReport(verified=seen)
        return not problems


def plan_apply(
    settings: dict[str, Scalar],
    *,
    node_name: str,
    config_path: str,
    current: bytes,
    new_text: str,
    pending: JournalEntry | None,
    config: Mapping[str, Any],
    gates: Mapping[str, bool],
    lock_token: str,
) -> ApplyPlan:
    """``settings`` (checked) over the original; ``current`` is the file as read now and
    ``pending`` the journal entry of an earlier arm still in effect (None: the first)."""
    original = pending.original if pending else current
    paths = list(settings)
    # the values before our first apply: a later arm keeps the first one's record
    before = dict(pending.applied.get("before", {})) if pending else {}
    before.update(
        {k: v for k, v in running_values(paths, config, gates).items() if k not in before}
    )
    new = new_text.encode("utf-8")
    record = ApplyRecord(
        node_name=node_name,
        settings=settings,
        journal_id=pending.id if pending else None,
        changed=new != current,
        restarted=False,
        diff=kc.diff(current.decode("utf-8", "replace"), new_text, config_path.lstrip("/")),
        original_sha256=rf.sha256(original),
        config_sha256=rf.sha256(new),
        before=before,
    )
    old_paths = pending.applied.get("paths", []) if pending else []
    back = [p for p in old_paths if p not in settings]  # an earlier arm's, now original
    expectations = [Expectation(p, v) for p, v in settings.items()]
    where = f"{node_name}:{config_path}"
    expectations += original_expectations(back, text_of(original, where), before)
    # ours: the bytes the file may have from here on (what it has, checked by the caller to
    # be ours or the original, and what we write)
    ours = sorted({rf.sha256(current), record.config_sha256})
    applied = {
        "settings": settings,
        "paths": sorted(set(old_paths) | set(paths)),
        "before": before,
        "lock_token": lock_token,
        "config_sha256": record.config_sha256,
        "ours_sha256": ours,
    }
    marker = Marker(tuple(ours), record.original_sha256, lock_token).render()
    return ApplyPlan(record, new, new_text, expectations, applied, marker)
