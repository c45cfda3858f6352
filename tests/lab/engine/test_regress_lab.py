"""`abtest regress` live on the lab: a known slowdown FAILs within the cap, an A/A (here a
byte-identical copy of the kubelet swapped in as the candidate binary) does not FAIL at a
confidence where chance alone FAILs it about once in 5 000 runs (tests/lab_aa.py), a missing
candidate binary is "could not measure" with the node untouched."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import cast

import lab_aa
import pytest
from lab_playbooks import quick_copy

from abtest.config.playbook import NodeProfile
from abtest.store.db import Store
from abtest.store.journal import Journal

pytestmark = pytest.mark.lab

CANDIDATE = "/var/lib/abtest-lab/bin/kubelet-abtest-candidate"


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _regress(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "abtest",
            "regress",
            "--profile",
            "lab",
            "--playbook",
            quick_copy(db.parent, "lab-regression"),
            "--db",
            str(db),
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _untouched(profile: NodeProfile, db: Path, config_sha: str, binary_sha: str) -> None:
    assert _sha(profile.kubelet_config_path) == config_sha
    assert _sha(profile.kubelet_binary_path) == binary_sha
    assert not Path(profile.kubelet_binary_path + ".abtest-original").exists()
    assert not Path(profile.lock_path).exists()
    if db.exists():
        journal = Journal(Store(db))
        assert journal.pending(profile.node_name) is None
        assert journal.pending(profile.node_name, kind="binary") is None


def test_a_known_slowdown_fails_within_the_cap(lab_profile: NodeProfile, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    config_sha, binary_sha = (
        _sha(lab_profile.kubelet_config_path),
        _sha(lab_profile.kubelet_binary_path),
    )
    junit = tmp_path / "junit.xml"
    proc = _regress(
        db,
        "--reference",
        "default",
        "--candidate",
        "kubeAPIQPS=3,kubeAPIBurst=10",
        "--junit",
        str(junit),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "FAIL" and out["looks"] <= out["max_looks"] == 3
    assert all(d["slowdown_ci"][0] > 5 for d in out["decisions"])
    cases = ET.parse(junit).getroot().iter("testcase")
    assert all(c.find("failure") is not None for c in cases)
    _untouched(lab_profile, db, config_sha, binary_sha)


def test_a_over_a_with_a_swapped_binary_does_not_fail(
    lab_profile: NodeProfile, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    subprocess.run(["cp", "-p", lab_profile.kubelet_binary_path, CANDIDATE], check=True)
    try:
        config_sha, binary_sha = (
            _sha(lab_profile.kubelet_config_path),
            _sha(lab_profile.kubelet_binary_path),
        )
        proc = _regress(
            db,
            "--reference",
            "default",
            "--candidate",
            f"binary={CANDIDATE}",
            "--rounds",
            str(lab_aa.ROUNDS),
            "--max-rounds",
            str(lab_aa.MAX_ROUNDS),
            "--confidence",
            str(lab_aa.CONFIDENCE),
        )
        assert proc.returncode in (0, 3), proc.stdout + proc.stderr
        out = json.loads(proc.stdout)
        assert out["verdict"] in ("PASS", "INCONCLUSIVE")
        with Store(db) as store:
            visits = store.visits_frame(out["run_id"])
            arms = store.arms_frame(out["run_id"])
        blocks = lab_aa.MAX_ROUNDS if out["looks"] == 2 else lab_aa.ROUNDS
        assert (visits["applied"] == 1).all() and len(visits) == 2 * blocks
        cand = json.loads(cast(str, arms.set_index("name").loc["candidate", "settings_json"]))
        assert cand == {"kubelet.binary": CANDIDATE}
        _untouched(lab_profile, db, config_sha, binary_sha)
    finally:
        Path(CANDIDATE).unlink(missing_ok=True)


def test_a_missing_candidate_binary_is_exit_4_and_the_node_untouched(
    lab_profile: NodeProfile, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    config_sha, binary_sha = (
        _sha(lab_profile.kubelet_config_path),
        _sha(lab_profile.kubelet_binary_path),
    )
    proc = _regress(db, "--reference", "default", "--candidate", "binary=/nonexistent/kubelet")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "does not exist" in proc.stdout + proc.stderr
    _untouched(lab_profile, db, config_sha, binary_sha)
    with Store(db) as store:
        assert store.query("SELECT COUNT(*) FROM visits")[0][0] == 0
