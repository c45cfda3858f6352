"""Fixtures for the node-control lab tests (imported by tests/lab/node/test_node_*.py).

``lab_node`` guards every lab test: it records the kubelet config's sha256 before the
test and, after it, restores anything still pending, then asserts the config is
byte-identical, the lock is free, no backup is left and the node is healthy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from abtest.config.playbook import NodeProfile
from abtest.node import remote_files as rf
from abtest.node.control import BACKUP_SUFFIX, NodeController
from abtest.node.lock import NodeLock
from abtest.node.preflight import show
from abtest.node.session import NodeSession
from abtest.store.db import Store
from abtest.store.journal import Journal


@dataclass
class LabNode:
    profile: NodeProfile
    store: Store
    original: bytes

    @property
    def original_sha256(self) -> str:
        return rf.sha256(self.original)

    def config_bytes(self) -> bytes:
        with NodeSession(self.profile) as node:
            return rf.read_file(node.ssh, self.profile.kubelet_config_path, sudo=True)

    def lock_present(self) -> bool:
        with NodeSession(self.profile) as node:
            return NodeLock(node.ssh, self.profile.lock_path, sudo=True).read() is not None

    def backup_present(self) -> bool:
        with NodeSession(self.profile) as node:
            path = self.profile.kubelet_config_path + BACKUP_SUFFIX
            return rf.exists(node.ssh, path, sudo=True)

    def healthy(self) -> bool:
        return bool(show(self.profile, store=self.store)["healthy"])

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """``abtest node ...`` in a child process using this test's results database."""
        full_env = {**os.environ, "ABTEST_DB": str(self.store.path), **(env or {})}
        return subprocess.Popen(
            [sys.executable, "-c", "from abtest.cli.main import main; main()", "node", *args],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )


@pytest.fixture()
def lab_node(lab_profile: NodeProfile, store: Store) -> Iterator[LabNode]:
    with NodeSession(lab_profile) as node:
        original = rf.read_file(node.ssh, lab_profile.kubelet_config_path, sudo=True)
        assert NodeLock(node.ssh, lab_profile.lock_path, sudo=True).read() is None, (
            "the lab node lock is held before the test; someone else is experimenting"
        )
    lab = LabNode(lab_profile, store, original)
    yield lab
    if Journal(store).pending(lab_profile.node_name) is not None:
        with NodeController(lab_profile, store, break_lock=True) as ctl:
            ctl.restore()
    assert lab.config_bytes() == original, "the kubelet config is not byte-identical"
    assert not lab.lock_present(), "the node lock was left behind"
    assert not lab.backup_present(), "the config backup was left behind"
    assert lab.healthy()
