"""The pod_field kind: one top-level pod spec field per factor, rendered over the workload's pod
(the kind added as one module, abtest/config/kinds/pod_field.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.batch.template import arm_workload, render_batch
from abtest.config.catalog import parse_catalog
from abtest.config.playbook import Workload
from abtest.engine.design import build_arms
from abtest.errors import ConfigError, UserError

TOKEN = """catalog: t
factors:
  - name: sa-token
    kind: pod_field
    field: automountServiceAccountToken
    on: true
    off: false
    summary: mount the service account token
"""


def _catalog(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cat.yaml"
    path.write_text(text)
    return path


def test_a_pod_field_factor_sets_its_field_in_every_pod_of_its_arm(tmp_path: Path) -> None:
    (f,) = parse_catalog(_catalog(tmp_path, TOKEN)).factors
    assert f.kind == "pod_field" and f.is_pod_spec and f.component == "pod"
    assert f.paths == () and f.targets == ("pod:automountServiceAccountToken",)
    assert f.to_json()["field"] == "automountServiceAccountToken"
    arms = {a.name: a for a in build_arms([f], "baseline")}
    arms |= {a.name: a for a in build_arms([f], "singles")}
    assert arms["+sa-token"].pod_dict() == {"pod.automountServiceAccountToken": True}
    assert arms["+sa-token"].settings == () and arms["+sa-token"].kubelet_binary is None
    for name, mounted in (("baseline", False), ("+sa-token", True)):
        workload = arm_workload(Workload(), arms[name])
        (pod,) = render_batch(
            workload, size=1, namespace="n", node_name="nd", run_id="r", round_tag="t"
        )
        assert pod.body["spec"]["automountServiceAccountToken"] is mounted
        assert "runtimeClassName" not in pod.body["spec"]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (("field: automountServiceAccountToken", "field: nodeName"), "cannot set spec.nodeName"),
        (("field: automountServiceAccountToken", "field: runtimeClassName"), "runtime_class"),
        (("field: automountServiceAccountToken", "field: spec.x"), "invalid pod spec field"),
        (("    field: automountServiceAccountToken\n", ""), "field"),
        (("on: true", "on: false"), "on and off values are the same"),
        (("on: true", "on: [1]"), "expected a scalar"),
    ],
)
def test_a_bad_pod_field_factor_is_one_error_naming_its_key(
    tmp_path: Path, edit: tuple[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        parse_catalog(_catalog(tmp_path, TOKEN.replace(*edit)))
    assert "factors[0]" in str(caught.value)


def test_two_factors_setting_one_pod_field_are_refused(tmp_path: Path) -> None:
    twice = TOKEN + TOKEN.split("factors:\n")[1].replace("name: sa-token", "name: again")
    factors = parse_catalog(_catalog(tmp_path, twice)).factors
    with pytest.raises(UserError, match="pod:automountServiceAccountToken"):
        build_arms(factors, "singles")
