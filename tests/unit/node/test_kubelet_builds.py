"""Kubelet builds as arms, without a node: releases (names, minimum, skew), the kubelet_build
catalog kind and unset gate levels, designs that would cross two builds, and the pre-flight's
per-arm reading of a binary (version, the gates its --help lists)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from abtest.batch.run_record import new_run
from abtest.config.catalog import parse_catalog
from abtest.config.domain import Release, parse_release, release_of, skew_problem
from abtest.config.plan_options import PlanOptions
from abtest.config.playbook import load_profile
from abtest.engine.design import build_arms
from abtest.engine.node_sweep import NodeSweep
from abtest.engine.sweep import SweepOptions
from abtest.engine.sweep_plan import SweepPlan, build_plan, profile_build
from abtest.errors import UserError
from abtest.lab import releases
from abtest.lab.layout import LabState, Paths
from abtest.lab.releases import DEFAULT_RELEASE
from abtest.node.kubelet_build import _GATE_LINE, KubeletBuild, arm_problems, build_path
from abtest.store.db import Store
from abtest.testing import FakeKit, FakeNode

NODE = "abtest-lab"

HELP = """Usage:
  kubelet [flags]
      --feature-gates mapStringBool   A set of key=value pairs that describe feature gates
                                      for alpha/experimental features. Options are:
                                      APIResponseCompression=true|false (BETA - default=true)
                                      ContainerCheckpoint=true|false (BETA - default=true)
                                      PLEGOnDemandRelist=true|false (BETA - default=true)
      --file-check-frequency duration
"""


def _catalog(tmp_path: Path, factors: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("catalog: c\nfactors:\n" + textwrap.indent(textwrap.dedent(factors), "  "))
    return path


RELEASES = """\
- name: kubelet-v1.34.4
  kind: kubelet_build
  off: node
  on: v1.34.4
  summary: old
- name: kubelet-v1.35.4
  kind: kubelet_build
  off: node
  on: 1.35.4
  summary: older
- name: PLEGOnDemandRelist
  kind: feature_gate
  off: null
  on: false
  summary: gate off
"""


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("v1.36", "is not a Kubernetes release"),
        ("v1.36.3-rc.1", "no -alpha, -beta or -rc"),
        ("latest", "is not a Kubernetes release"),
        ("v1.33.9", "older than the lab supports"),
        ("v2.0.0", "is not a Kubernetes release"),
    ],
)
def test_a_bad_release_is_one_error(text: str, words: str) -> None:
    with pytest.raises(UserError, match=words) as caught:
        parse_release(text, "--kubernetes")
    assert caught.value.exit_code == 2 and "--kubernetes" in str(caught.value)


def test_releases_parse_and_the_skew_policy_holds() -> None:
    assert parse_release("1.36.3") == Release(1, 36, 3) == DEFAULT_RELEASE
    assert parse_release("v1.34.4").staging == "v0.34.4"
    assert release_of("Kubernetes v1.35.4") == Release(1, 35, 4)
    assert release_of("v1.36.3-vendor.2") == Release(1, 36, 3)
    assert release_of("nothing") is None
    server = Release(1, 36, 3)
    assert skew_problem(Release(1, 34, 4), server) is None
    assert skew_problem(Release(1, 33, 0), server) is None
    assert "newer than the API server" in (skew_problem(Release(1, 37, 2), server) or "")
    assert "more than 3 minors older" in (skew_problem(Release(1, 32, 0), server) or "")


def test_kubelet_build_levels_and_unset_gates_make_the_release_arms(tmp_path: Path) -> None:
    cat = parse_catalog(_catalog(tmp_path, RELEASES))
    both = build_arms(cat.factors, "baseline") + build_arms(cat.factors, "singles")
    arms = {a.name: a for a in both}
    assert arms["baseline"].kubelet_binary is None and arms["baseline"].settings == ()
    assert arms["+kubelet-v1.34.4"].kubelet_binary == "v1.34.4"
    assert arms["+kubelet-v1.35.4"].kubelet_binary == "v1.35.4"  # normalised to upstream's tag
    # the older builds do not know the gate: unset, it is in none of their settings
    assert arms["+kubelet-v1.34.4"].settings == ()
    assert arms["+PLEGOnDemandRelist"].settings == (("featureGates.PLEGOnDemandRelist", False),)
    assert arms["+PLEGOnDemandRelist"].kubelet_binary is None
    assert cat.get("PLEGOnDemandRelist").show(False) == "unset"


@pytest.mark.parametrize("design", ["combined", "factorial", "leave-one-out"])
def test_a_design_crossing_two_builds_is_refused(tmp_path: Path, design: str) -> None:
    cat = parse_catalog(_catalog(tmp_path, RELEASES))
    factors = cat.factors[:2] if design == "leave-one-out" else cat.factors
    if design == "leave-one-out":
        factors = (*factors, cat.factors[2])
    with pytest.raises(UserError, match="crosses the kubelet-build factors") as caught:
        build_arms(factors, design)
    assert "kubelet-v1.34.4" in str(caught.value) and "baseline+singles" in str(caught.value)


def test_builds_with_different_off_levels_are_refused(tmp_path: Path) -> None:
    body = RELEASES.replace("  off: node\n  on: 1.35.4", "  off: v1.34.4\n  on: 1.35.4")
    cat = parse_catalog(_catalog(tmp_path, body))
    with pytest.raises(UserError, match="different off levels"):
        build_arms(cat.factors, "singles")


@pytest.mark.parametrize(
    ("level", "words"),
    [
        ("v1.36", "is neither a kubelet release nor a release"),
        ("relative/kubelet", "is neither a kubelet release nor a release"),
        ("v1.36.3+Agc", "is not a series name"),
        ("v1.36.3+./my-series", "a series folder cannot be named here"),
        ('"/opt/k;rm -rf /"', "invalid path on the node"),
        ("/opt/../etc/kubelet", "invalid path on the node"),
        ("5", "must be a string"),
        ("v1.30.0", "older than the lab supports"),
    ],
)
def test_a_bad_build_level_names_the_file_and_field(tmp_path: Path, level: str, words: str) -> None:
    body = f"- name: b\n  kind: kubelet_build\n  off: node\n  on: {level}\n  summary: s\n"
    path = _catalog(tmp_path, body)
    with pytest.raises(UserError, match=words) as caught:
        parse_catalog(path)
    assert str(path) in str(caught.value)


def test_a_gate_level_must_be_true_false_or_null(tmp_path: Path) -> None:
    body = "- name: G\n  kind: feature_gate\n  off: null\n  on: maybe\n  summary: s\n"
    with pytest.raises(UserError, match="true or false"):
        parse_catalog(_catalog(tmp_path, body))


def test_build_paths_come_from_the_profile() -> None:
    lab = load_profile("lab")
    assert build_path("v1.35.4", lab) == "/var/lib/abtest-lab/kubelets/v1.35.4/kubelet"
    assert build_path("/opt/kubelet-rc1", lab) == "/opt/kubelet-rc1"
    assert build_path(None, lab) is None
    bare = dataclasses.replace(lab, kubelet_builds_dir=None)
    with pytest.raises(UserError, match=r"no kubelet\.builds_dir"):
        build_path("v1.35.4", bare)


def test_the_help_text_lists_the_gates_a_build_knows() -> None:
    assert set(_GATE_LINE.findall(HELP)) == {
        "APIResponseCompression",
        "ContainerCheckpoint",
        "PLEGOnDemandRelist",
    }


def test_each_arm_is_checked_against_its_own_binary(tmp_path: Path) -> None:
    lab = load_profile("lab")
    cat = parse_catalog(_catalog(tmp_path, RELEASES))
    arms = build_arms(cat.factors, "singles")
    # a v1.34.4 arm that also sets the v1.36 gate: refused naming arm, binary, version, gate
    crossed = dataclasses.replace(arms[0], settings=(("featureGates.PLEGOnDemandRelist", True),))
    old = "/var/lib/abtest-lab/kubelets/v1.34.4/kubelet"
    builds: dict[str | None, KubeletBuild | None] = {
        old: KubeletBuild(old, "Kubernetes v1.34.4", Release(1, 34, 4), frozenset({"X"})),
        "/var/lib/abtest-lab/kubelets/v1.35.4/kubelet": None,  # not placed
    }
    problems = arm_problems([crossed, arms[1], arms[2]], lab, builds, "v1.36.3")
    text = "\n".join(problems)
    assert "arm +kubelet-v1.34.4 sets feature gate PLEGOnDemandRelist" in text
    assert f"kubelet v1.34.4 ({old})" in text
    assert "kubelet build v1.35.4" in text and "abtest lab kubelets v1.35.4" in text
    assert len(problems) == 2  # the gate-off arm runs the node's own kubelet: not read here
    # a kubelet newer than the API server
    newer: dict[str | None, KubeletBuild | None] = {
        old: KubeletBuild(old, "Kubernetes v1.37.2", Release(1, 37, 2), frozenset())
    }
    (skew,) = arm_problems([arms[0]], lab, newer, "v1.36.3")
    assert "newer than the API server v1.36.3" in skew


def test_a_kept_lab_moves_up_with_its_state_and_never_down(tmp_path: Path) -> None:
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    said: list[str] = []
    assert releases.choose_release(paths, None, False, said.append) == DEFAULT_RELEASE  # fresh
    paths.root.mkdir()
    LabState().save(paths)  # a state from before releases were recorded: v1.34.4
    assert releases.choose_release(paths, None, False, said.append) == Release(1, 34, 4)
    assert not said  # no flag: the kept lab's release, said nothing, changed nothing
    assert releases.choose_release(paths, DEFAULT_RELEASE, False, said.append) == DEFAULT_RELEASE
    assert "moving the kept lab from v1.34.4 to v1.36.3" in said[0] and "etcd data kept" in said[0]
    with pytest.raises(UserError, match="while it runs") as running:
        releases.choose_release(paths, DEFAULT_RELEASE, True, said.append)
    assert "abtest lab down" in str(running.value)
    LabState(kubernetes="v1.36.3").save(paths)
    with pytest.raises(UserError, match="older minor") as older:
        releases.choose_release(paths, Release(1, 34, 4), False, said.append)
    assert "abtest lab down --purge" in str(older.value)


def _abtest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args], capture_output=True, text=True, timeout=120
    )


def test_lab_flags_with_a_bad_release_are_exit_2_before_anything() -> None:
    bad = _abtest("lab", "up", "--kubernetes", "v1.36")
    assert bad.returncode == 2 and "is not a Kubernetes release" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    old = _abtest("lab", "up", "--kubernetes", "v1.30.1")
    assert old.returncode == 2 and "older than the lab supports" in old.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="lab kubelets needs root before it checks")
def test_a_kubelet_newer_than_the_control_plane_is_refused_before_any_build() -> None:
    done = _abtest("lab", "kubelets", "v1.40.0")
    assert done.returncode == 2, done.stderr
    assert "newer than the API server" in done.stderr and "version-skew" in done.stderr


def _release_plan(store: Store) -> tuple[SweepPlan, str]:
    plan = build_plan(PlanOptions(playbook="lab-releases", rounds=1, sizes=(5,), seed=3))
    return plan, new_run(store, "sweep", command="test", node_name=NODE, plan=plan.to_dict())


def test_each_build_arm_swaps_its_binary_and_is_checked_after_the_restart(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        plan, run_id = _release_plan(store)
        node = FakeNode(NODE)
        worker = NodeSweep(
            plan, plan.profiles[0], store, run_id, SweepOptions(), lambda *_: None,
            threading.Event(), FakeKit(node),
        )  # fmt: skip
        outcome = worker.run()
    assert outcome.status == "finished" and outcome.failed_arms == {}
    swaps = [c for c in node.calls if c.startswith("binary ")]
    assert sorted(swaps) == sorted(
        [
            "binary /var/lib/abtest-lab/kubelets/v1.34.4/kubelet",
            "binary /var/lib/abtest-lab/kubelets/v1.35.4/kubelet",
            "binary original",
            "binary original",
        ]
    )
    # the kubelet running before a visit may be another arm's build: not asked (the
    # pre-flight read every binary, the restart's verification checks each setting)
    assert node.checked_known and not any(node.checked_known)
    assert worker.expected_kubelet == {
        "baseline": "v1.36.3",
        "+kubelet-v1.34.4": "v1.34.4",
        "+kubelet-v1.35.4": "v1.35.4",
        "+PLEGOnDemandRelist": "v1.36.3",
    }


def test_a_build_that_does_not_take_fails_its_arm_naming_both_versions(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        plan, run_id = _release_plan(store)
        node = FakeNode(NODE)
        node.stuck_at = "v1.36.3"  # the swap "happened", the node still runs its own kubelet
        worker = NodeSweep(
            plan, plan.profiles[0], store, run_id, SweepOptions(), lambda *_: None,
            threading.Event(), FakeKit(node),
        )  # fmt: skip
        outcome = worker.run()
    assert set(outcome.failed_arms) == {"+kubelet-v1.34.4", "+kubelet-v1.35.4"}
    why = outcome.failed_arms["+kubelet-v1.35.4"]
    assert "reports kubelet v1.36.3 after the restart, not its build's v1.35.4" in why
    assert not node.pending  # restored at the end


# --- one build for every arm (--kubelet-build) --------------------------------------------

AGC = "v1.36.3+agc"
AGC_PATH = f"/var/lib/abtest-lab/kubelets/{AGC}/kubelet"


def _agc_plan(store: Store) -> tuple[SweepPlan, str]:
    plan = build_plan(
        PlanOptions(
            playbook="lab-sweep",
            catalog="agc",
            factors=("KubeletParallelPodStatusSync", "KubeletPodStatusRetry"),
            design="gates-all",
            rounds=1,
            sizes=(5,),
            seed=3,
            kubelet_build=AGC,
        )
    )
    return plan, new_run(store, "sweep", command="test", node_name=NODE, plan=plan.to_dict())


def test_kubelet_build_puts_every_arm_on_the_build_and_records_its_source(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        plan, run_id = _agc_plan(store)
        assert {a.kubelet_binary for a in plan.arms} == {AGC}
        node = FakeNode(NODE)
        worker = NodeSweep(
            plan, plan.profiles[0], store, run_id, SweepOptions(), lambda *_: None,
            threading.Event(), FakeKit(node),
        )  # fmt: skip
        outcome = worker.run()
        env = store.run_row(run_id)["env_json"]
    assert outcome.status == "finished" and outcome.failed_arms == {}
    # every visit runs the build (no visit the node's own), and the node is restored at the end
    swaps = [c for c in node.calls if c.startswith("binary ")]
    assert swaps == [f"binary {AGC_PATH}"] * len(plan.arms)
    assert not node.pending
    assert set(worker.expected_kubelet.values()) == {AGC}  # the whole version, not v1.36.3
    records = json.loads(env)["kubelet_builds"][NODE]
    assert set(records) == {a.name for a in plan.arms}
    assert records["baseline"] == {"path": AGC_PATH, "version": AGC, "source": {"series": "agc"}}


def test_a_patched_build_whose_node_reports_only_the_release_fails_its_arms(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        plan, run_id = _agc_plan(store)
        node = FakeNode(NODE)
        node.stuck_at = "v1.36.3"  # the upstream kubelet of the same release still runs
        worker = NodeSweep(
            plan, plan.profiles[0], store, run_id, SweepOptions(), lambda *_: None,
            threading.Event(), FakeKit(node),
        )  # fmt: skip
        outcome = worker.run()
    assert set(outcome.failed_arms) == {a.name for a in plan.arms}
    assert (
        f"reports kubelet v1.36.3 after the restart, not its build's {AGC}"
        in (outcome.failed_arms["baseline"])
    )
    assert not node.pending


@pytest.mark.parametrize(
    ("build", "says"),
    [
        ("v1.36.3+./agc", "a series folder cannot be named here"),
        ("agc", "neither a kubelet release nor a release"),
    ],
)
def test_a_bad_kubelet_build_option_is_one_error(build: str, says: str) -> None:
    with pytest.raises(UserError, match=says):
        build_plan(PlanOptions(playbook="lab-sweep", catalog="agc", kubelet_build=build))


def test_kubelet_build_with_a_build_factor_is_refused() -> None:
    with pytest.raises(UserError, match="already runs its own kubelet build"):
        build_plan(PlanOptions(playbook="lab-releases", rounds=1, kubelet_build=AGC))


def _profile_with(tmp_path: Path, extra: str, builds_dir: bool = True) -> Path:
    text = Path(load_profile("lab").source).read_text()
    if not builds_dir:
        text = "\n".join(
            line for line in text.splitlines() if not line.strip().startswith("builds_dir:")
        )
    text = text.replace("  config_path:", f"  build: {extra}\n  config_path:", 1)
    path = tmp_path / "agc-node.yaml"
    path.write_text(text)
    return path


def test_a_profiles_kubelet_build_is_every_arms_build(tmp_path: Path) -> None:
    path = _profile_with(tmp_path, AGC)
    assert load_profile(str(path)).kubelet_build == AGC
    plan = build_plan(
        PlanOptions(playbook="lab-sweep", catalog="agc", profiles=(str(path),), rounds=1)
    )
    assert {a.kubelet_binary for a in plan.arms} == {AGC}
    # two nodes whose profiles disagree are refused: their arms would differ
    agc_node = load_profile(str(path))
    with pytest.raises(UserError, match="the profiles name different kubelet builds"):
        profile_build([agc_node, dataclasses.replace(agc_node, kubelet_build=None)])


@pytest.mark.parametrize(
    ("value", "builds_dir", "says"),
    [
        ("v1.36.3+./agc", True, "a series folder cannot be named here"),
        ("agc", True, "neither a kubelet release nor a release"),
        (AGC, False, "a build is found in kubelet.builds_dir, which is not set"),
    ],
)
def test_a_bad_profile_kubelet_build_names_the_file(
    tmp_path: Path, value: str, builds_dir: bool, says: str
) -> None:
    path = _profile_with(tmp_path, value, builds_dir)
    with pytest.raises(UserError, match=says) as caught:
        load_profile(str(path))
    assert str(path) in str(caught.value)
