"""Kubelet builds as arms on the real lab (v1.36.3 control plane): a sweep whose arms are the
node's own kubelet, a placed v1.35.4 kubelet and the v1.36.3 kubelet with PLEGOnDemandRelist
off, checked while each batch runs by a watcher that reads the node (nodeInfo.kubeletVersion
and /configz through the API server) with its own client, not the code under test; and a
controller SIGKILLed in the middle of a binary swap, after which `node restore` puts the
node back byte for byte."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from lab_playbooks import quick_copy

from abtest.config.playbook import NodeProfile
from abtest.store.db import Store
from abtest.store.journal import Journal

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[3]
OLD = "v1.35.4"  # one release the lab places (built once; ~5 min on a new machine)
CATALOG = f"""\
catalog: builds-test
factors:
  - name: kubelet-{OLD}
    kind: kubelet_build
    off: node
    on: {OLD}
    summary: an older kubelet build
  - name: PLEGOnDemandRelist
    kind: feature_gate
    off: null
    on: false
    summary: the gate switched off on the lab's kubelet
"""


def _abtest(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _node_files(profile: NodeProfile) -> tuple[str, str]:
    """The digests of the node's kubelet config and binary: what every test here must find
    unchanged after the tool is done, however it ended."""
    return _sha(profile.kubelet_config_path), _sha(profile.kubelet_binary_path)


@pytest.fixture(scope="module")
def placed() -> str:
    proc = _abtest("lab", "kubelets", OLD, timeout=2400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = f"/var/lib/abtest-lab/kubelets/{OLD}/kubelet"
    assert os.access(path, os.X_OK)
    return path


def _core(profile: NodeProfile) -> client.CoreV1Api:
    new_client: Callable[..., client.ApiClient] = config.new_client_from_config
    return client.CoreV1Api(new_client(config_file=profile.kubeconfig))


class NodeWatcher(threading.Thread):
    """Every 0.3 s: the tool's pods on the node (their round tags), and what the node says it
    runs: the kubelet version it posts and the PLEGOnDemandRelist value in its /configz."""

    def __init__(self, profile: NodeProfile) -> None:
        super().__init__(daemon=True)
        self.core = _core(profile)
        self.node = profile.node_name
        self.seen: dict[str, set[tuple[str, object]]] = {}
        self.first_seen: dict[str, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            # a restart in progress: the node proxy is briefly refused
            with contextlib.suppress(client.ApiException):
                self._sample()
            time.sleep(0.3)

    def _sample(self) -> None:
        pods: Any = self.core.list_namespaced_pod(
            "abtest", label_selector="app.kubernetes.io/managed-by=abtest", _request_timeout=5
        )
        tags = {
            p.metadata.labels["abtest/round"]
            for p in pods.items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }
        if not tags:
            return
        node: Any = self.core.read_node(self.node, _request_timeout=5)
        raw: Any = self.core.connect_get_node_proxy_with_path(
            self.node, "configz", _request_timeout=5, _preload_content=False
        )
        gates = json.loads(raw.data)["kubeletconfig"].get("featureGates") or {}
        seen = (node.status.node_info.kubelet_version, gates.get("PLEGOnDemandRelist", "unset"))
        for tag in tags:
            self.first_seen.setdefault(tag, time.monotonic())
            self.seen.setdefault(tag, set()).add(seen)


def test_each_batch_runs_under_its_arms_kubelet_and_gate(
    lab_profile: NodeProfile, placed: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "builds.yaml"
    catalog.write_text(CATALOG)
    db = tmp_path / "r.sqlite"
    before = _node_files(lab_profile)
    watcher = NodeWatcher(lab_profile)
    watcher.start()
    try:
        proc = _abtest(
            "gates",
            "--catalog",
            str(catalog),
            "--design",
            "baseline+singles",
            "--rounds",
            "1",
            "--sizes",
            "3",
            "--playbook",
            quick_copy(tmp_path),
            "--db",
            str(db),
            "--json",
        )
    finally:
        watcher.done.set()
        watcher.join(10)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = json.loads(proc.stdout)["run_id"]
    with Store(db) as store:
        rounds = store.query(
            "SELECT arm FROM rounds WHERE run_id = ? AND accepted = 1 ORDER BY started_wall",
            (run_id,),
        )
    arms = [r[0] for r in rounds]
    assert sorted(arms) == ["+PLEGOnDemandRelist", f"+kubelet-{OLD}", "baseline"]
    # the watcher's round tags in the order it first saw them are the rounds in time order
    tags = sorted(watcher.first_seen, key=watcher.first_seen.__getitem__)
    assert len(tags) == len(arms), (tags, arms)
    expected = {
        "baseline": {("v1.36.3", "unset")},
        f"+kubelet-{OLD}": {(OLD, "unset")},
        "+PLEGOnDemandRelist": {("v1.36.3", False)},
    }
    for arm, tag in zip(arms, tags, strict=True):
        assert watcher.seen[tag] == expected[arm], (arm, watcher.seen[tag])
    # and the node is as it was
    assert _node_files(lab_profile) == before
    assert not Path(lab_profile.kubelet_binary_path + ".abtest-original").exists()


def test_a_build_arm_with_a_gate_its_binary_lacks_is_refused_untouched(
    lab_profile: NodeProfile, placed: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "crossed.yaml"
    # PLEGOnDemandRelist at false in every arm: the v1.35.4 arm sets a gate v1.35 lacks
    catalog.write_text(CATALOG.replace("off: null\n    on: false", "off: false\n    on: true"))
    db = tmp_path / "r.sqlite"
    before = _node_files(lab_profile)
    proc = _abtest(
        "gates", "--catalog", str(catalog), "--design", "baseline+singles", "--rounds", "1",
        "--sizes", "3", "--db", str(db),
    )  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    err = proc.stdout + proc.stderr
    assert f"arm +kubelet-{OLD} sets feature gate PLEGOnDemandRelist" in err
    assert f"kubelet {OLD} ({placed})" in err and "nothing was changed" in err
    assert _node_files(lab_profile) == before


def test_sigkill_mid_swap_then_node_restore_puts_the_node_back(
    lab_profile: NodeProfile, placed: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "builds.yaml"
    catalog.write_text(CATALOG)
    db = tmp_path / "r.sqlite"
    binary = lab_profile.kubelet_binary_path
    before = _node_files(lab_profile)
    backup = Path(binary + ".abtest-original")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "abtest", "gates", "--catalog", str(catalog),
            f"kubelet-{OLD}", "--all", "--rounds", "1", "--sizes", "3",
            "--db", str(db),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not backup.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backup.exists(), "the swap never started"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)  # mid-swap: the backup is there, the copy may not be
        proc.wait(30)
    restore = _abtest("node", "restore", "--profile", "lab", "--db", str(db), "--json")
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert json.loads(restore.stdout)["restored"] is True
    assert _node_files(lab_profile) == before
    assert not backup.exists()
    with Store(db) as store:
        journal = Journal(store)
        assert journal.pending(lab_profile.node_name) is None
        assert journal.pending(lab_profile.node_name, kind="binary") is None
    node: Any = _core(lab_profile).read_node(lab_profile.node_name)
    assert node.status.node_info.kubelet_version == "v1.36.3"
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True"


def test_the_agc_catalog_runs_the_upstream_gate_and_names_the_five_vendor_ones(
    lab_profile: NodeProfile, tmp_path: Path
) -> None:
    before = _node_files(lab_profile)
    db = tmp_path / "r.sqlite"
    proc = _abtest("gates", "--catalog", "agc", "--all", "--rounds", "1", "--sizes", "1",
                   "--db", str(db))  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    err = proc.stderr
    vendor = (
        "KubeletQOSCgroupUpdateCoalescing",
        "KubeletParallelPodStatusSync",
        "KubeletPodStatusRetry",
        "KubeletSystemdCgroupCreateWithResources",
        "KubeletCgroupControllerReuse",
    )
    for gate in vendor:
        assert f"factor featureGates.{gate}: unknown to the running" in err, gate
    assert "PLEGOnDemandRelist: unknown" not in err  # upstream since v1.36: the lab knows it
    assert "nothing was changed" in err
    assert _node_files(lab_profile) == before
    # and alone it runs for real, verified in effect (/configz and the feature metric)
    proc = _abtest("gates", "--catalog", "agc", "PLEGOnDemandRelist", "--all",
                   "--playbook", quick_copy(tmp_path), "--rounds", "1", "--sizes", "3",
                   "--db", str(db), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["nodes"][0]["failed_arms"] == {}
    with Store(db) as store:
        (verified,) = store.query(
            "SELECT verified_json FROM visits WHERE run_id = ? AND arm = ? AND applied = 1",
            (json.loads(proc.stdout)["run_id"], "+PLEGOnDemandRelist"),
        )
    check = json.loads(verified[0])["featureGates.PLEGOnDemandRelist"]
    assert check == {"expected": True, "configz": True, "metric": True}
    assert _node_files(lab_profile) == before
