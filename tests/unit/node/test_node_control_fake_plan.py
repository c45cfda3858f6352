"""The pure middle of an apply (abtest.node.apply_plan): what is written, what must show in
the running kubelet, what the journal and the node-side marker say is ours."""

from __future__ import annotations

import pytest

from abtest.config.domain import Scalar
from abtest.errors import UserError
from abtest.node import remote_files as rf
from abtest.node.apply_plan import ApplyPlan, checked_settings, plan_apply
from abtest.node.health import Expectation
from abtest.node.kubelet_config import apply_settings
from abtest.node.remote_files import Marker
from abtest.store.db import Store
from abtest.store.journal import Journal, JournalEntry
from abtest.testing.host import CONFIG

RUNNING = {"kubeAPIQPS": 50, "kubeAPIBurst": 100}
GATES = {"ContainerCheckpoint": False}


def _plan(
    settings: dict[str, Scalar], current: bytes, pending: JournalEntry | None = None
) -> ApplyPlan:
    checked = checked_settings(settings)
    original = pending.original if pending is not None else current
    return plan_apply(
        checked,
        node_name="n",
        config_path="/etc/kubelet/config.yaml",
        current=current,
        new_text=apply_settings(original.decode(), checked, where="n"),
        pending=pending,
        config=RUNNING,
        gates=GATES,
        lock_token="tok",
    )


def test_first_apply_plans_the_new_bytes_the_checks_and_what_is_ours() -> None:
    plan = _plan({"kubeAPIQPS": 5}, CONFIG)
    rec = plan.record
    assert b"kubeAPIQPS: 5" in plan.new and rec.changed
    assert rec.original_sha256 == rf.sha256(CONFIG) and rec.journal_id is None
    assert rec.before == {"kubeAPIQPS": 50}
    assert "-kubeAPIQPS: 50" in rec.diff and "+kubeAPIQPS: 5" in rec.diff
    assert plan.expectations == [Expectation("kubeAPIQPS", 5)]
    applied = plan.applied
    assert applied["paths"] == ["kubeAPIQPS"] and applied["lock_token"] == "tok"
    ours = sorted({rf.sha256(CONFIG), rf.sha256(plan.new)})
    assert applied["ours_sha256"] == ours
    marker = Marker.parse(plan.marker)
    assert marker is not None and list(marker.ours) == ours and marker.lock_token == "tok"
    assert not plan.record_if_in_effect(RUNNING, GATES)
    assert plan.record_if_in_effect({"kubeAPIQPS": 5}, GATES)


def test_a_later_arm_keeps_the_first_before_and_checks_the_earlier_path_is_back(
    store: Store,
) -> None:
    first = _plan({"kubeAPIQPS": 5}, CONFIG)
    entry = Journal(store).begin(
        node_name="n",
        profile_name="p",
        path="/etc/kubelet/config.yaml",
        original=CONFIG,
        applied=first.applied,
        backup_path="/etc/kubelet/config.yaml.abtest-original",
    )
    second = _plan({"kubeAPIBurst": 20}, first.new, pending=entry)
    rec = second.record
    assert b"kubeAPIQPS: 50" in second.new and b"kubeAPIBurst: 20" in second.new
    assert rec.journal_id == entry.id and rec.original_sha256 == rf.sha256(CONFIG)
    assert rec.before == {"kubeAPIQPS": 50, "kubeAPIBurst": 100}
    assert second.applied["paths"] == ["kubeAPIBurst", "kubeAPIQPS"]
    assert second.expectations == [
        Expectation("kubeAPIBurst", 20),
        Expectation("kubeAPIQPS", 50),  # the original file's value, back
    ]


def test_checked_settings_refuses_a_bad_value_before_anything() -> None:
    assert checked_settings({"kubeAPIQPS": 5}) == {"kubeAPIQPS": 5}
    with pytest.raises(UserError):
        checked_settings({"featureGates.X": "yes"})
