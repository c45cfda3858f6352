"""Pod-spec factors (runtime_class, pod_annotation) and runtime arms, without a cluster:
catalog and playbook checks (one error naming file, field and problem; exit 2), the arm's
pod part in the rendered pod, the restart-skip rule in the plan and in the sweep, the
runtime checks before an arm and after each round (issue 13 part 1)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from abtest.batch.round_records import RoundResult
from abtest.batch.spec import RoundSpec
from abtest.batch.template import arm_workload, render_batch
from abtest.cli.main import app
from abtest.config.catalog import parse_catalog
from abtest.config.domain import Arm
from abtest.config.plan_options import PlanOptions
from abtest.config.playbook import NodeProfile, Workload, load_profile, parse_profile
from abtest.engine.design import build_arms
from abtest.engine.pod_arms import (
    ArmRuntimeUnavailable,
    RuntimeCheck,
    check_arm_runtime,
    round_problem,
)
from abtest.engine.schedule import build_schedule
from abtest.engine.sweep import SweepOptions, run_sweep
from abtest.engine.sweep_plan import SweepPlan, build_plan, kubelet_visits, restart_count
from abtest.errors import ConfigError, UserError
from abtest.node.records import ApplyRecord
from abtest.node.runtimes import parse_runtime_handlers, select_round_handlers
from abtest.store.db import Store
from abtest.testing import FakeController, FakeKit, FakeNode, FakeSession, fake_profiles, fake_round

CRUN = """  - name: crun
    kind: runtime_class
    on: crun
    off: runc
    summary: crun instead of runc
"""
MODE = """  - name: cold
    kind: pod_annotation
    annotation: agc.cloud.tencent.com/cube-template-mode
    on: cold
    off: auto
    summary: cold start instead of template restore
"""
QPS = """  - name: kubeAPIQPS
    kind: kubelet_settings
    on: {kubeAPIQPS: 3, kubeAPIBurst: 10}
    off: {kubeAPIQPS: 50, kubeAPIBurst: 100}
    summary: throttled client
"""


def _catalog(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "cat.yaml"
    path.write_text("catalog: t\nfactors:\n" + body)
    return path


# --------------------------------------------------------------------------- catalog


def test_pod_spec_factors_parse(tmp_path: Path) -> None:
    crun, cold, qps = parse_catalog(_catalog(tmp_path, CRUN + MODE + QPS)).factors
    assert crun.is_pod_spec and cold.is_pod_spec and not qps.is_pod_spec
    assert crun.paths == () and crun.targets == ("pod:runtimeClassName",)
    assert cold.param == "agc.cloud.tencent.com/cube-template-mode"
    assert crun.component == "pod"


@pytest.mark.parametrize(
    ("body", "field", "problem"),
    [
        (CRUN.replace("on: crun", "on: runc"), "on", "on and off values are the same"),
        (MODE.replace("on: cold", "on: auto"), "on", "on and off values are the same"),
        (MODE.replace("on: cold", "on: 5"), "on", "annotation value must be a string"),
        (MODE.replace("off: auto", "off: true"), "off", "annotation value must be a string"),
        (CRUN.replace("on: crun", "on: Crun_1"), "on", "invalid RuntimeClass name"),
        (CRUN.replace("on: crun", "on: 3"), "on", "invalid RuntimeClass name"),
        (CRUN.replace("on: crun", "on: {a: b}"), "on", "invalid RuntimeClass name"),
        (MODE.replace("cube-template-mode", "cube template"), "annotation", "invalid annotation"),
        (MODE.replace("agc.cloud.tencent.com/", "Agc_Cloud/"), "annotation", "prefix"),
        (MODE.replace("cube-template-mode", "-mode"), "annotation", "name part"),
        (MODE.replace("cube-template-mode", "x" * 64), "annotation", "name part"),
        (MODE.replace("agc.cloud.tencent.com/cube-template-mode", "a/b/c"), "annotation", "prefix"),
        (
            MODE.replace("    annotation: agc.cloud.tencent.com/cube-template-mode\n", ""),
            "annotation",
            "missing required key",
        ),
        (
            CRUN.replace("    off: runc\n", "    off: runc\n    annotation: x\n"),
            "annotation",
            "unknown key",
        ),
        (CRUN.replace("kind: runtime_class", "kind: runtimeClass"), "kind", "unknown kind"),
        (CRUN.replace("name: crun", "name: 'c run'"), "name", "invalid factor name"),
    ],
)
def test_bad_pod_spec_factor_is_one_error_naming_file_and_field(
    tmp_path: Path, body: str, field: str, problem: str
) -> None:
    path = _catalog(tmp_path, body)
    with pytest.raises(ConfigError, match=problem) as err:
        parse_catalog(path)
    assert err.value.where == f"{path}: factors[0].{field}"


def test_bad_annotation_value_exits_2_from_the_cli(tmp_path: Path) -> None:
    path = _catalog(tmp_path, MODE.replace("on: cold", "on: 5"))
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "gates", "--list", "--catalog", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert f"{path}: factors[0].on" in line and "must be a string" in line
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- playbook


def _playbook(tmp_path: Path, catalog: Path, factors: list[str], extra: str = "") -> Path:
    path = tmp_path / "pb.yaml"
    path.write_text(
        f"playbook: t\ncatalog: {catalog}\nfactors: {json.dumps(factors)}\nsizes: [3]\n"
        f"rounds: 2\nprofile: lab\nwarmup: false\n{extra}"
    )
    return path


@pytest.mark.parametrize(
    ("body", "factors", "extra", "problem"),
    [
        (CRUN, ["crun", "crun"], "", "'crun' is listed twice"),
        (
            CRUN + CRUN.replace("name: crun", "name: kata").replace("on: crun", "on: kata"),
            ["crun", "kata"],
            "",
            "both set the pod's runtimeClassName",
        ),
        (
            MODE + MODE.replace("name: cold", "name: cold2"),
            ["cold", "cold2"],
            "",
            "both set the pod's annotation agc.cloud.tencent.com/cube-template-mode",
        ),
        (
            CRUN,
            ["crun"],
            "workload:\n  runtime_class: runc\n",
            "workload.runtime_class",
        ),
        (
            MODE,
            ["cold"],
            "workload:\n  annotations: {agc.cloud.tencent.com/cube-template-mode: auto}\n",
            "workload.annotations",
        ),
    ],
)
def test_a_playbook_crossing_a_pod_factor_with_itself_is_one_error(
    tmp_path: Path, body: str, factors: list[str], extra: str, problem: str
) -> None:
    pb = _playbook(tmp_path, _catalog(tmp_path, body), factors, extra)
    with pytest.raises(UserError, match=problem) as err:
        build_plan(PlanOptions(playbook=str(pb)))
    assert err.value.where == f"{pb}: factors"


def test_two_runtime_factors_exit_2_from_plan(tmp_path: Path) -> None:
    kata = CRUN.replace("name: crun", "name: kata").replace("on: crun", "on: kata")
    pb = _playbook(tmp_path, _catalog(tmp_path, CRUN + kata), ["crun", "kata"])
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "plan", "--playbook", str(pb)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert f"{pb}: factors" in line and "runtimeClassName" in line


def test_factor_names_on_the_command_line_are_checked_too(tmp_path: Path) -> None:
    pb = _playbook(tmp_path, _catalog(tmp_path, CRUN), ["crun"])
    with pytest.raises(UserError, match="listed twice") as err:
        build_plan(PlanOptions(playbook=str(pb), factors=("crun", "crun")))
    assert err.value.where == "factors"


# --------------------------------------------------------------------------- arms and pods


def _factorial(tmp_path: Path) -> dict[str, Arm]:
    factors = parse_catalog(_catalog(tmp_path, CRUN + QPS + MODE)).factors
    return {a.name: a for a in build_arms(factors, "factorial")}


def test_an_arm_is_a_kubelet_part_and_a_pod_part(tmp_path: Path) -> None:
    arms = _factorial(tmp_path)
    base, crun = arms["baseline"], arms["+crun"]
    assert base.runtime_class == "runc" and crun.runtime_class == "crun"
    assert base.settings == crun.settings == (("kubeAPIQPS", 50), ("kubeAPIBurst", 100))
    assert base.kubelet_key == crun.kubelet_key != arms["+kubeAPIQPS"].kubelet_key
    assert arms["+cold"].annotations == (("agc.cloud.tencent.com/cube-template-mode", "cold"),)
    assert crun.pod_dict() == {
        "pod.runtimeClassName": "crun",
        "pod.annotations.agc.cloud.tencent.com/cube-template-mode": "auto",
    }


def test_the_arm_pod_part_is_rendered_into_every_pod(tmp_path: Path) -> None:
    arm = next(a for a in _factorial(tmp_path).values() if a.on == {"crun", "cold"})
    workload = arm_workload(Workload(annotations=(("team", "perf"),)), arm)
    pods = render_batch(
        workload, size=2, namespace="abtest", node_name="n", run_id="r", round_tag="t"
    )
    for pod in pods:
        assert pod.body["spec"]["runtimeClassName"] == "crun"
        assert pod.body["metadata"]["annotations"] == {
            "agc.cloud.tencent.com/cube-template-mode": "cold",
            "team": "perf",
        }


def test_a_custom_template_that_leaves_the_runtime_out_still_carries_it(tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml.j2"
    template.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n"
        "    - {name: main, image: busybox}\n"
    )
    workload = Workload(template=str(template), runtime_class="crun", annotations=(("a", "b"),))
    (pod,) = render_batch(
        workload, size=1, namespace="abtest", node_name="n", run_id="r", round_tag="t"
    )
    assert pod.body["spec"]["runtimeClassName"] == "crun"
    assert pod.body["metadata"]["annotations"] == {"a": "b"}


# --------------------------------------------------------------------------- restarts


def test_a_visit_with_the_kubelet_settings_of_the_visit_before_needs_no_restart() -> None:
    a = Arm("baseline", frozenset(), (("kubeAPIQPS", 50),), pod=(("pod.runtimeClassName", "runc"),))
    b = Arm(
        "+crun", frozenset({"crun"}), (("kubeAPIQPS", 50),), pod=(("pod.runtimeClassName", "crun"),)
    )
    c = Arm("+q", frozenset({"q"}), (("kubeAPIQPS", 3),), pod=(("pod.runtimeClassName", "runc"),))
    schedule = build_schedule([a, b, c], [3], blocks=4, seed=3, warmup=False)
    flags = kubelet_visits(schedule)
    assert flags[0] is True
    for before, visit, flag in zip(
        schedule.visits[:-1], schedule.visits[1:], flags[1:], strict=True
    ):
        same = schedule.arm(before.arm).settings == schedule.arm(visit.arm).settings
        assert flag is (not same)
    assert sum(flags) < len(schedule.visits)  # seed 3: some a/b visits are adjacent


def test_plan_says_how_many_restarts_the_design_costs(tmp_path: Path) -> None:
    pb = _playbook(tmp_path, _catalog(tmp_path, CRUN + QPS), ["crun", "kubeAPIQPS"])
    plan = build_plan(PlanOptions(playbook=str(pb), design="factorial", rounds=3))
    n = restart_count(plan)
    assert n == sum(kubelet_visits(plan.schedule)) < len(plan.schedule.visits)
    assert plan.to_dict()["kubelet_restarts"] == n
    args = ["plan", "--playbook", str(pb), "--design", "factorial", "--rounds", "3"]
    result = CliRunner().invoke(app, [*args, "--db", str(tmp_path / "x.sqlite")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"{len(plan.schedule.visits)} visits, {n} kubelet restarts" in text
    assert "pod.runtimeClassName=crun" in text
    # a design of kubelet factors only restarts at every visit, as before
    only = build_plan(PlanOptions(playbook="lab-sweep", rounds=2, sizes=(5,)))
    assert restart_count(only) == len(only.schedule.visits)


# --------------------------------------------------------------------------- node listings

INFO = json.dumps(
    {"config": {"containerd": {"runtimes": {"runc": {}, "crun": {"runtimeType": "x"}}}}}
)


def _sandbox(name: str, handler: str, *, ns: str = "abtest", tag: str = "r1", tool: bool = True):  # type: ignore[no-untyped-def]
    labels = {"io.kubernetes.pod.namespace": ns, "abtest/round": tag}
    if tool:
        labels["app.kubernetes.io/managed-by"] = "abtest"
    return {
        "id": "a" * 64,
        "metadata": {"name": name, "namespace": ns},
        "state": "SANDBOX_READY",
        "labels": labels,
        "runtimeHandler": handler,
    }


def test_runtime_handlers_from_crictl_info() -> None:
    assert parse_runtime_handlers(INFO, where="w") == {"runc", "crun"}
    status = json.dumps({"status": {"runtimeHandlers": [{"name": ""}, {"name": "kata"}]}})
    assert parse_runtime_handlers(status, where="w") == {"kata"}
    with pytest.raises(UserError, match="did not print JSON"):
        parse_runtime_handlers("runc crun", where="w")
    with pytest.raises(UserError, match="names no handler"):
        parse_runtime_handlers("{}", where="w")


def test_round_handlers_count_only_the_rounds_own_sandboxes() -> None:
    listing = json.dumps(
        {
            "items": [
                _sandbox("abt-r1-0000", "crun"),
                _sandbox("abt-r1-0001", ""),
                _sandbox("other-ns", "runc", ns="abtest-ci"),
                _sandbox("other-round", "runc", tag="r2"),
                _sandbox("not-ours", "runc", tool=False),
            ]
        }
    )
    assert select_round_handlers(listing, "abtest", "r1", where="w") == {
        "abt-r1-0000": "crun",
        "abt-r1-0001": "",
    }
    with pytest.raises(UserError, match="without an `items` list"):
        select_round_handlers("[]", "abtest", "r1", where="w")


def test_profile_sandbox_handlers_must_print_json_of_every_state(tmp_path: Path) -> None:
    text = Path(load_profile("lab").source).read_text()
    bad = text.replace("pods -o json --label io.kubernetes.pod.namespace={namespace} --label "
                       "abtest/round={round}", "pods -q --label abtest/round={round}")  # fmt: skip
    assert bad != text
    path = tmp_path / "p.yaml"
    path.write_text(bad)
    with pytest.raises(ConfigError, match="runtimeHandler") as err:
        parse_profile(path)
    assert err.value.where == f"{path}: commands.sandbox_handlers"


# --------------------------------------------------------------------------- runtime checks


class Handlers:
    def __init__(self, names: frozenset[str] | None) -> None:
        self.names = names

    def runtime_handlers(self) -> frozenset[str] | None:
        return self.names


LAB = load_profile("lab")


def test_an_arm_whose_runtime_is_missing_fails_with_the_reason() -> None:
    classes = {"runc": "runc", "crun": "crun", "kata": "kata"}
    node = Handlers(frozenset({"runc", "crun"}))
    ok = check_arm_runtime("+crun", "crun", handler_of=classes.get, node=node, profile=LAB)
    assert ok == RuntimeCheck("crun", "crun")
    assert check_arm_runtime("b", None, handler_of=classes.get, node=node, profile=LAB) is None
    with pytest.raises(ArmRuntimeUnavailable, match="no RuntimeClass 'gvisor'"):
        check_arm_runtime("+g", "gvisor", handler_of=classes.get, node=node, profile=LAB)
    with pytest.raises(ArmRuntimeUnavailable, match="handler 'kata', which the node's runtime"):
        check_arm_runtime("+k", "kata", handler_of=classes.get, node=node, profile=LAB)
    bare = dataclasses.replace(LAB, sandbox_handlers_command=None)
    with pytest.raises(ArmRuntimeUnavailable, match=r"commands\.sandbox_handlers"):
        check_arm_runtime("+crun", "crun", handler_of=classes.get, node=node, profile=bare)


def _pod(name: str, rc: str | None, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"runtimeClassName": rc},
        "status": {"phase": phase},
    }


def test_a_round_not_under_its_runtime_is_named() -> None:
    check = RuntimeCheck("crun", "crun")
    pods = [_pod("p0", "crun"), _pod("p1", "crun")]
    assert round_problem(check, pods, {"p0": "crun", "p1": "crun"}) is None
    wrong = round_problem(check, pods, {"p0": "crun", "p1": "runc"})
    assert wrong and "1 sandboxes not under handler 'crun'" in wrong and "p1: 'runc'" in wrong
    spec = round_problem(check, [_pod("p0", "runc")], {"p0": "crun"})
    assert spec and "without runtimeClassName 'crun'" in spec
    unseen = round_problem(check, pods, {"p0": "crun"})
    assert unseen and "1 running pods with no sandbox" in unseen
    # a pod that never ran has no sandbox to prove anything: acceptance judges it
    assert round_problem(check, [_pod("p0", "crun", "Pending")], {}) is None


# --------------------------------------------------------------------------- the sweep


class RecordingController(FakeController):
    def apply(
        self, settings: Any, *, check_known: bool = True, force_restart: bool = False
    ) -> ApplyRecord:
        self.node.record(f"force_restart={force_restart}")
        return super().apply(settings, check_known=check_known, force_restart=force_restart)


class RuntimeSession(FakeSession):
    def runtime_handlers(self) -> frozenset[str] | None:
        return frozenset({"runc", "crun"})

    def round_handlers(self, namespace: str, round_tag: str) -> dict[str, str] | None:
        return self.node.sandboxes  # type: ignore[attr-defined,no-any-return]


class RuntimeKit(FakeKit):
    """Runtime classes runc and crun; each round's sandboxes ran under ``node.sandboxes``."""

    def __init__(self, node: FakeNode, classes: dict[str, str]) -> None:
        super().__init__(node)
        self.classes = classes

    def controller(self, profile: NodeProfile, store: Store, **_: Any) -> FakeController:
        return RecordingController(self.nodes[profile.node_name])

    def session(self, profile: NodeProfile) -> FakeSession:
        return RuntimeSession(self.nodes[profile.node_name])

    def runtime_class_handler(self, cluster: Any, name: str) -> str | None:
        return self.classes.get(name)

    def round_pods(self, cluster: Any, namespace: str, round_tag: str) -> list[dict[str, Any]]:
        node = cluster.node
        return [_pod(n, node.pod_class) for n in node.sandboxes]

    def run_round(self, cluster: Any, spec: RoundSpec) -> RoundResult:
        node_name, namespace, size, verify = spec.node_name, spec.namespace, spec.size, spec.verify
        workload, generator = spec.workload, spec.generator
        assert workload is not None and generator is not None
        node = self.nodes[node_name]
        node.record(f"round {size} {workload.runtime_class}")
        node.pod_class = workload.runtime_class  # type: ignore[attr-defined]
        node.sandboxes = {"p0": node.handler_for(workload.runtime_class)}  # type: ignore[attr-defined]
        result = fake_round(node_name, namespace, size, generator)
        problem = verify("tag") if verify else None
        if problem:
            result.accepted, result.reason = False, problem
        return result


def _runtime_sweep(
    tmp_path: Path,
    store: Store,
    *,
    handler_for: Callable[[str | None], str],
    classes: dict[str, str] | None = None,
) -> tuple[FakeNode, SweepPlan, str]:
    pb = _playbook(tmp_path, _catalog(tmp_path, CRUN + QPS), ["crun", "kubeAPIQPS"])
    plan = build_plan(PlanOptions(playbook=str(pb), design="factorial", rounds=2))
    node = FakeNode("node-a")
    node.handler_for = handler_for  # type: ignore[attr-defined]
    plan = dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], [node]))
    kit = RuntimeKit(node, classes if classes is not None else {"runc": "runc", "crun": "crun"})
    result = run_sweep(plan, store, SweepOptions(), lambda *_: None, kit=kit)
    return node, plan, result.run_id


def test_sweep_restarts_only_when_the_kubelet_settings_change(tmp_path: Path, store: Store) -> None:
    node, plan, run_id = _runtime_sweep(tmp_path, store, handler_for=lambda rc: rc or "")
    forced = [c for c in node.calls if c.startswith("force_restart=")]
    assert forced == [f"force_restart={flag}" for flag in kubelet_visits(plan.schedule)]
    assert "force_restart=False" in forced
    rounds = [c for c in node.calls if c.startswith("round ")]
    assert {r.split()[-1] for r in rounds} == {"runc", "crun"}
    arms = {r["name"]: json.loads(r["settings_json"]) for r in store.query(
        "SELECT name, settings_json FROM arms WHERE run_id = ?", (run_id,))}  # fmt: skip
    assert arms["+crun"]["pod.runtimeClassName"] == "crun"
    accepted = store.query("SELECT accepted FROM rounds WHERE run_id = ?", (run_id,))
    assert all(r[0] for r in accepted)


def test_a_round_whose_sandboxes_ran_under_another_handler_is_rejected(
    tmp_path: Path, store: Store
) -> None:
    _, _, run_id = _runtime_sweep(tmp_path, store, handler_for=lambda rc: "runc")
    rows = store.query("SELECT arm, accepted, reason FROM rounds WHERE run_id = ?", (run_id,))
    crun = [r for r in rows if "crun" in r[0].split("+") or r[0] == "combined"]
    assert crun and all(not r[1] and "not under handler 'crun'" in r[2] for r in crun)
    assert all(r[1] for r in rows if r not in crun)


def test_a_runtime_class_the_cluster_lacks_fails_the_arm_before_any_pod(
    tmp_path: Path, store: Store
) -> None:
    node, _, run_id = _runtime_sweep(
        tmp_path, store, handler_for=lambda rc: rc or "", classes={"runc": "runc"}
    )
    assert not [c for c in node.calls if c.startswith("round ") and c.endswith("crun")]
    failed = store.arms.failed(run_id)
    assert set(failed) == {"+crun", "combined"}
    assert all("no RuntimeClass 'crun'" in why for why in failed.values())
    node.verify()
