"""`lab up --api-faults KIB` on the running lab (issue 45 section 1, failing writes for the
status-retry gate): with the proxy cutting the kubelet's connections, a pod batch sees some
of the kubelet's status PATCHes fail, as its own rest_client_requests_total counts them and
the report reads them; set back to 0, none fails. `lab status` and the run's environment
show the setting; nothing restarts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from abtest.analysis.api_path import failed_writes
from abtest.analysis.run_data import run_data
from abtest.config.api_faults import ApiFaults
from abtest.lab import api_proxy, layout
from abtest.lab.layout import LabState
from abtest.store.db import Store
from abtest.store.run_frames import read_run

pytestmark = pytest.mark.lab

SET_KIB = 8  # a 20-pod batch had 12 of 73 PATCHes fail at 8 KiB, 2 of 62 at 32 KiB
PODS = 12


def _abtest(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "abtest", *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def _batch() -> tuple[str, int, int]:
    """One batch through the CLI: its run id, and its failed and all PATCH requests."""
    # a short observation window: the writes that matter happen before the last Ready
    argv = ("batch", "--profile", "lab", "--pods", str(PODS), "--observe", "2", "--json")
    out = json.loads(_abtest(*argv))
    with Store(os.environ["ABTEST_DB"]) as store:
        data = run_data(read_run(store, out["run_id"]))
    (writes,) = failed_writes(data)
    return str(data.env.get("api_faults")), writes.failed, writes.total


def test_api_faults_fail_some_status_writes_and_none_at_zero(lab_up: None) -> None:
    paths = layout.Paths()
    state = LabState.load(paths)
    assert state is not None
    assert api_proxy.stored_faults(paths) == ApiFaults(), "the lab tests run without faults"
    try:
        _abtest("lab", "up", "--api-faults", str(SET_KIB))
        st = json.loads(_abtest("lab", "status", "--json"))
        assert st["api_faults_kib"] == SET_KIB
        assert api_proxy.current_faults(state.ports) == ApiFaults(SET_KIB)
        recorded, failed, total = _batch()
    finally:
        _abtest("lab", "up", "--api-faults", "0")
    print(f"at {SET_KIB} KiB: {failed} of {total} PATCH failed")
    assert recorded == str({"cut_after_kib": SET_KIB})
    assert 0 < failed < total
    assert api_proxy.current_faults(state.ports) == ApiFaults()
    recorded, failed, total = _batch()
    print(f"without faults: {failed} of {total} PATCH failed")
    assert recorded == "None" and failed == 0 and total >= PODS
    after = json.loads(_abtest("lab", "status", "--json"))
    assert after["up"] and after["ready"] and after["api_faults_kib"] == 0
