"""Factor kinds beyond one kubelet path: kubelet_settings (several paths at once) and the
pod-spec kinds runtime_class and pod_annotation (issue 13 part 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abtest.cli.main import app
from abtest.config.catalog import load_catalog, parse_catalog
from abtest.config.domain import Factor
from abtest.config.kinds import kind
from abtest.config.kinds.base import PodSpecKind
from abtest.config.yaml_checks import Fields
from abtest.engine.design import build_arms
from abtest.errors import ConfigError, UserError

HEAD = "catalog: t\nfactors:\n"


def _catalog(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "cat.yaml"
    path.write_text(HEAD + body)
    return path


QPS = """  - name: throttle
    kind: kubelet_settings
    on: {kubeAPIQPS: 3, kubeAPIBurst: 10}
    off: {kubeAPIBurst: 100, kubeAPIQPS: 50}
    summary: s
"""


def test_kubelet_settings_factor_sets_every_path(tmp_path: Path) -> None:
    f = parse_catalog(_catalog(tmp_path, QPS)).factors[0]
    assert f.kind == "kubelet_settings" and not f.is_pod_spec
    assert f.paths == ("kubeAPIQPS", "kubeAPIBurst")
    # off is kept in on's order, so the two levels line up
    assert f.kubelet_settings(False) == (("kubeAPIQPS", 50), ("kubeAPIBurst", 100))
    assert f.show(True) == "kubeAPIQPS=3, kubeAPIBurst=10"
    gate = Factor("GateA", "feature_gate", True, False, "")
    arms = {a.name: a for a in build_arms([f, gate], "factorial")}
    assert arms["baseline"].settings_dict() == {
        "kubeAPIQPS": 50,
        "kubeAPIBurst": 100,
        "featureGates.GateA": False,
    }
    assert arms["+throttle"].settings_dict() == {
        "kubeAPIQPS": 3,
        "kubeAPIBurst": 10,
        "featureGates.GateA": False,
    }


@pytest.mark.parametrize(
    ("body", "where", "problem"),
    [
        (
            QPS.replace("{kubeAPIBurst: 100, kubeAPIQPS: 50}", "{kubeAPIQPS: 50}"),
            "off",
            "same paths",
        ),
        (QPS.replace("{kubeAPIQPS: 3, kubeAPIBurst: 10}", "5"), "on", "non-empty mapping"),
        (QPS.replace("{kubeAPIQPS: 3, kubeAPIBurst: 10}", "{}"), "on", "non-empty mapping"),
        (QPS.replace("kubeAPIQPS: 3,", "'kube API': 3,"), "on.kube API", "invalid Kubelet"),
        (QPS.replace("kubeAPIQPS: 3,", "kubeAPIQPS: [3],"), "on.kubeAPIQPS", "scalar"),
        (
            QPS.replace("kubeAPIQPS: 3,", "featureGates.X: 1,").replace(
                "kubeAPIQPS: 50", "featureGates.X: false"
            ),
            "on.featureGates.X",
            "true or false",
        ),
        (
            QPS.replace("{kubeAPIQPS: 3, kubeAPIBurst: 10}", "{kubeAPIQPS: 50, kubeAPIBurst: 100}"),
            "on",
            "the same",
        ),
    ],
)
def test_bad_kubelet_settings_are_one_error(
    tmp_path: Path, body: str, where: str, problem: str
) -> None:
    path = _catalog(tmp_path, body)
    with pytest.raises(ConfigError, match=problem) as err:
        parse_catalog(path)
    assert err.value.where == f"{path}: factors[0].{where}"


def test_shipped_lab_catalogs_throttle_both_client_fields() -> None:
    for name in ("lab", "lab-mild"):
        f = load_catalog(name).get("kubeAPIQPS")
        assert f.kind == "kubelet_settings"
        assert dict(f.kubelet_settings(False)) == {"kubeAPIQPS": 50, "kubeAPIBurst": 100}
        assert dict(f.kubelet_settings(True))["kubeAPIBurst"] == 10


def test_gates_list_prints_every_value(tmp_path: Path) -> None:
    path = _catalog(tmp_path, QPS)
    result = CliRunner().invoke(app, ["gates", "--list", "--catalog", str(path), "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["on"] == {"kubeAPIQPS": 3, "kubeAPIBurst": 10}
    assert row["paths"] == ["kubeAPIQPS", "kubeAPIBurst"]
    table = CliRunner().invoke(app, ["gates", "--list", "--catalog", str(path)])
    assert table.exit_code == 0, table.output
    assert "kubeAPIBurst=10" in table.output.replace("\n", "")


def test_unknown_kind_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    path = _catalog(tmp_path, QPS.replace("kind: kubelet_settings", "kind: sysctl"))
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "gates", "--list", "--catalog", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert f"{path}: factors[0].kind" in proc.stderr and "unknown kind 'sysctl'" in proc.stderr


def test_two_factors_setting_one_path_are_refused(tmp_path: Path) -> None:
    f = parse_catalog(_catalog(tmp_path, QPS)).factors[0]
    qps = Factor("kubeAPIQPS", "config_field", 5, 50, "")
    with pytest.raises(UserError, match="same path 'kubeAPIQPS'"):
        build_arms([f, qps], "singles")


def test_every_pod_spec_kind_shares_one_base_and_reads_its_key_through_it() -> None:
    # base.PodSpecKind and FactorKind.read_param serve runtime_class, pod_annotation and
    # pod_field; each kind's own refusals are in test_pod_spec_factors and test_pod_field_kind
    for name in ("runtime_class", "pod_annotation", "pod_field"):
        pod = kind(name)
        assert isinstance(pod, PodSpecKind) and pod.component == "pod" and pod.pod_spec
    assert kind("feature_gate").component == "kubelet" and not kind("feature_gate").pod_spec
    entry = Fields({"annotation": "example.com/mode", "field": "enableServiceLinks"}, Path("f"))
    assert kind("runtime_class").read_param(entry) is None
    assert kind("pod_annotation").read_param(entry) == "example.com/mode"
    assert kind("pod_field").read_param(entry) == "enableServiceLinks"
