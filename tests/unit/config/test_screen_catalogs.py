"""The shipped screening and reference data: gates/lab-screen.yaml with playbooks/lab-screen.yaml,
gates/lab-reference.yaml with playbooks/lab-reference.yaml (the reference method on the lab)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from abtest.config.catalog import load_catalog
from abtest.config.playbook import load_playbook
from abtest.engine.design import build_arms, resolution, screen_matrix

# Upstream KubeletConfiguration defaults (v1beta1) of every path the lab catalogs set: the
# lab baseline must be an upstream-default kubelet wherever the experiment touches it.
UPSTREAM_DEFAULTS: dict[str, object] = {
    "kubeAPIQPS": 50,
    "kubeAPIBurst": 100,
    "eventRecordQPS": 50,
    "eventBurst": 100,
    "cpuCFSQuota": True,
    "localStorageCapacityIsolation": True,
    "featureGates.EventedPLEG": False,
    "featureGates.PodReadyToStartContainersCondition": True,
    "featureGates.PodObservedGenerationTracking": True,
    "featureGates.InPlacePodVerticalScaling": True,
    "featureGates.PodLevelResources": True,
}


def test_lab_screen_is_a_16_arm_resolution_iii_screen_off_the_upstream_defaults() -> None:
    pb = load_playbook("lab-screen")
    assert pb.design == "screen" and pb.catalog == "lab-screen"
    cat = load_catalog(pb.catalog)
    assert 8 <= len(cat.factors) <= 15
    for f in cat.factors:
        for path, off in f.kubelet_settings(False):
            assert UPSTREAM_DEFAULTS[path] == off, f.name
    arms = build_arms(cat.factors, pb.design)
    assert len(arms) == 16 and arms[0].name == "baseline"
    assert resolution(screen_matrix(len(cat.factors))) == 3
    # 50 pods must schedule on the 2-CPU lab node
    assert pb.workload.cpu_request == "10m" and pb.sizes == (50,)


def test_lab_reference_is_the_reference_method_runtime_x_settings() -> None:
    pb = load_playbook("lab-reference")
    assert pb.design == "factorial" and pb.catalog == "lab-reference"
    assert pb.sizes == (50, 100, 150) and pb.rounds == 5
    g = pb.generator
    assert (g.qps, g.concurrency, g.timeout_s, g.observe_s) == (1000, 150, 300, 10)
    w = pb.workload
    assert (w.image, w.command) == ("docker.io/library/busybox:1.36.1", ("sleep", "3600"))
    assert (w.cpu_request, w.memory_request, w.cpu_limit, w.memory_limit) == (
        "10m",
        "1Mi",
        "2",
        "128Mi",
    )
    cat = load_catalog(pb.catalog)
    crun, speedups = cat.get("crun"), cat.get("speedups")
    assert (crun.kind, crun.on, crun.off) == ("runtime_class", "crun", "runc")
    assert speedups.kind == "kubelet_settings" and speedups.expected_effect == "faster"
    for path, off in speedups.kubelet_settings(False):
        assert UPSTREAM_DEFAULTS[path] == off
    # no null control or known slowdown in the reference catalog
    assert [f.name for f in cat.factors] == ["crun", "speedups"]
    arms = {a.name: a for a in build_arms(cat.factors, pb.design)}
    assert set(arms) == {"baseline", "+crun", "+speedups", "combined"}
    assert arms["baseline"].runtime_class == "runc" and arms["combined"].runtime_class == "crun"


def test_plan_of_the_screen_states_its_fraction_and_aliasing(tmp_path: Path) -> None:
    env = {**os.environ, "ABTEST_DB": str(tmp_path / "none.sqlite")}
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "plan", "--playbook", "lab-screen", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["design"] == "screen" and len(data["factors"]) == 9
    assert data["schedule"]["measured_rounds"] == 32  # 16 arms x 2 blocks x one size
    assert "2^(9-5) res III" in data["design_note"]
    assert "aliased with two-factor interactions" in data["design_note"]
