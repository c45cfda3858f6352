"""Names are checked whole (issue 35): every name and value check in abtest goes through
abtest.config.full_match (``re.fullmatch``). Each validator below accepts its good value and refuses
that value with a trailing newline, with a NUL, and an empty value; no pattern used for a check
is anchored with ``$`` (which matches before a final newline). pod_field names are checked
against the pod spec, their levels against the field's type."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes.client import V1PodSpec

from abtest.config import k8s_names, ssh_names
from abtest.config.datafiles import resolve_profile
from abtest.config.domain import parse_release
from abtest.config.kinds import config_field, feature_gate, kubelet_build, pod_field
from abtest.config.kinds.base import FactorKind
from abtest.config.playbook import _parse_workload
from abtest.config.pod_spec import POD_SPEC_FIELDS
from abtest.config.quantities import parse_quantity
from abtest.config.yaml_checks import Fields
from abtest.errors import AbtestError
from abtest.node.binary import check_path
from abtest.node.kubelet_config import parse_set_option, split_path

WHERE = Path("catalog.yaml")


def _fields(data: dict[str, object]) -> Fields:
    return Fields(data, WHERE)


def _no_problem(problem: Callable[[str], str | None]) -> Callable[[str], object]:
    def accept(value: str) -> object:
        if (said := problem(value)) is not None:
            raise ValueError(said)
        return value

    return accept


def _quantity(value: str) -> object:
    if parse_quantity(value) is None:
        raise ValueError(value)
    return value


def _field(value: str) -> object:
    levels = {"on": True, "off": False}
    return pod_field.KIND.read_param(_fields({"field": value, **levels}))


# validator -> (how it is called, a value it accepts): each must refuse the value with "\n"
# appended, with a NUL inside, and ""
VALIDATORS: dict[str, tuple[Callable[[str], object], str]] = {
    "feature gate name": (
        lambda v: feature_gate.KIND.check_name(_fields({}), v),
        "PLEGOnDemandRelist",
    ),
    "factor name": (lambda v: FactorKind().check_name(_fields({}), v), "sa-token"),
    "config field path": (lambda v: config_field.KIND.check_name(_fields({}), v), "kubeAPIQPS"),
    "pod_field field": (_field, "enableServiceLinks"),
    "--set path": (lambda v: parse_set_option(f"{v}=true"), "featureGates.X"),
    "--set value": (lambda v: parse_set_option(f"kubeAPIQPS={v}"), "5"),
    "kubelet settings path": (split_path, "featureGates.X"),
    "--namespace": (_no_problem(k8s_names.namespace_problem), "abtest-bench"),
    "runtime class": (_no_problem(k8s_names.runtime_class_problem), "runc"),
    "annotation key": (
        _no_problem(k8s_names.annotation_key_problem),
        "agc.cloud.tencent.com/cube-template-mode",
    ),
    "node name": (_no_problem(k8s_names.node_name_problem), "abtest-lab"),
    "run id": (_no_problem(k8s_names.run_id_problem), "20261202-034717-3eab10"),
    "image": (_no_problem(k8s_names.image_problem), "docker.io/library/busybox:1.36.1"),
    "node path": (_no_problem(k8s_names.node_path_problem), "/var/lib/kubelet/config.yaml"),
    "CPU quantity": (lambda v: _parse_workload(_fields({"requests": {"cpu": v}})), "100m"),
    "node allocatable quantity": (_quantity, "128Mi"),
    "ssh.host": (_no_problem(ssh_names.host_problem), "node-1.example.com"),
    "ssh.user": (_no_problem(ssh_names.user_problem), "ubuntu"),
    "kubelet binary path (node)": (lambda v: check_path(v, "binary="), "/usr/bin/kubelet"),
    "kubelet build path (catalog)": (
        lambda v: kubelet_build.KIND.read_levels(_fields({"on": v, "off": "node"})),
        "/opt/kubelet",
    ),
    "kubernetes release": (parse_release, "v1.36.3"),
    "shipped profile name": (resolve_profile, "lab"),
}


@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_every_validator_accepts_its_good_value(name: str) -> None:
    call, good = VALIDATORS[name]
    call(good)


@pytest.mark.parametrize("bad", ["newline", "nul", "empty"])
@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_every_validator_refuses_a_trailing_newline_a_nul_and_an_empty_value(
    name: str, bad: str
) -> None:
    call, good = VALIDATORS[name]
    value = {"newline": good + "\n", "nul": good[:2] + "\x00" + good[2:], "empty": ""}[bad]
    with pytest.raises((AbtestError, ValueError)):
        call(value)


#: patterns that parse a command's output (leading blanks, a final newline), not checks; a
#: diff's hunk header and an added gate line, which git and the series check read by prefix
PARSERS = {"_CLOCK_RE", "_HUNK_HEAD", "_ADDED_GATE"}


def _check_patterns() -> list[str]:
    """Every compiled pattern in abtest/config and abtest/node that ends in ``$``, and every
    ``.match(`` on a pattern (checks use abtest.config.full_match)."""
    found = []
    root = Path(__file__).parents[3] / "abtest"
    for path in [*root.glob("config/**/*.py"), *root.glob("node/*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "compile"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).endswith("$")
            ):
                found.append(f"{path.name}:{node.lineno} pattern ends in $")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "match"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id.isupper()
                and node.func.value.id not in PARSERS
            ):
                found.append(f"{path.name}:{node.lineno} {node.func.value.id}.match(")
    return found


def test_no_check_is_anchored_with_dollar_or_uses_match() -> None:
    assert _check_patterns() == []


def test_the_pod_spec_table_is_the_clients_v1podspec() -> None:
    client = {V1PodSpec.attribute_map[k]: t for k, t in V1PodSpec.openapi_types.items()}
    assert client == POD_SPEC_FIELDS


POD_FIELD_CASES = [
    # (id, field, on, off, words of the refusal)
    (
        "typo",
        "automountServiceAcountToken",
        False,
        True,
        "did you mean automountServiceAccountToken",
    ),
    ("unknown", "noSuchField", True, False, "has no field 'noSuchField'"),
    ("containers-scalar", "containers", "x", "y", "list[V1Container], not a scalar"),
    ("affinity-scalar", "affinity", True, False, "V1Affinity, not a scalar"),
    ("node-selector-scalar", "nodeSelector", "a", "b", "not a scalar"),
    ("bool-field-given-string", "enableServiceLinks", "yes", "no", "is a bool, got str"),
    ("bool-field-given-int", "hostNetwork", 1, 0, "is a bool, got int"),
    ("int-field-given-bool", "terminationGracePeriodSeconds", True, False, "is a int, got bool"),
    ("int-field-given-float", "activeDeadlineSeconds", 1.5, 3.0, "is a int, got float"),
    ("str-field-given-int", "dnsPolicy", 1, 2, "is a str, got int"),
    ("newline-nodeName", "nodeName\n", "a", "b", "invalid pod spec field"),
    ("forbidden", "nodeName", "a", "b", "cannot set spec.nodeName"),
]


@pytest.mark.parametrize(
    ("field", "on", "off", "words"),
    [c[1:] for c in POD_FIELD_CASES],
    ids=[c[0] for c in POD_FIELD_CASES],
)
def test_pod_field_is_checked_against_the_pod_spec(
    field: str, on: object, off: object, words: str
) -> None:
    f = _fields({"field": field, "on": on, "off": off})
    with pytest.raises(AbtestError, match=re.escape(words)):
        pod_field.KIND.read_param(f)
        pod_field.KIND.read_levels(f)


@pytest.mark.parametrize(
    ("field", "on", "off"),
    [
        ("automountServiceAccountToken", True, False),
        ("terminationGracePeriodSeconds", 0, 30),
        ("dnsPolicy", "Default", "ClusterFirst"),
    ],
)
def test_pod_field_takes_a_scalar_field_with_values_of_its_type(
    field: str, on: object, off: object
) -> None:
    f = _fields({"field": field, "on": on, "off": off})
    assert pod_field.KIND.read_param(f) == field
    assert pod_field.KIND.read_levels(f) == (on, off)
