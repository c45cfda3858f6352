"""Catalog loading: the shipped catalogs and every bad-input case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abtest.cli.main import app
from abtest.config.catalog import load_catalog, select_factors
from abtest.errors import ConfigError, UserError

AGC = [
    "KubeletQOSCgroupUpdateCoalescing",
    "KubeletParallelPodStatusSync",
    "KubeletPodStatusRetry",
    "KubeletSystemdCgroupCreateWithResources",
    "KubeletCgroupControllerReuse",
    "PLEGOnDemandRelist",
]


def test_agc_catalog_has_the_six_vendor_gates() -> None:
    cat = load_catalog("agc")
    assert [f.name for f in cat.factors] == AGC
    for f in cat.factors:
        assert f.kind == "feature_gate"
        assert (f.on, f.off) == (True, False)
        assert f.component == "kubelet"
        assert "vendor" in f.availability
        assert f.path == f"featureGates.{f.name}"
        assert f.summary and "\n" not in f.summary


def test_lab_catalog_has_a_null_control_a_known_speedup_and_a_known_slowdown() -> None:
    # issue 24: the newcomer's first report shows a real saving (the upstream AGC gate), a
    # known slowdown and a null control
    cat = load_catalog("lab")
    gates = {f.name: f for f in cat.factors if f.kind == "feature_gate"}
    fields = [f for f in cat.factors if f.kind == "kubelet_settings"]
    assert gates["ContainerCheckpoint"].expected_effect == "none"
    pleg = gates["PLEGOnDemandRelist"]
    assert (pleg.off, pleg.on, pleg.expected_effect) == (False, True, "faster")
    assert any(f.expected_effect == "slower" for f in fields)
    qps = cat.get("kubeAPIQPS")
    # the lab baseline is the upstream default client (50/100); "on" sets both fields
    assert dict(qps.kubelet_settings(True)) == {"kubeAPIQPS": 3, "kubeAPIBurst": 10}
    assert dict(qps.kubelet_settings(False)) == {"kubeAPIQPS": 50, "kubeAPIBurst": 100}


def test_gates_list_json_lists_the_six_agc_gates() -> None:
    result = CliRunner().invoke(app, ["gates", "--list", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [d["name"] for d in data] == AGC
    for d in data:
        assert {"name", "kind", "on", "off", "summary"} <= set(d)


def test_catalog_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "catalog: mine\nfactors:\n  - {name: Foo, kind: feature_gate, on: true, off: false,"
        " summary: s}\n"
    )
    assert load_catalog(str(path)).factors[0].name == "Foo"


def test_select_factors_rejects_unknown_names() -> None:
    cat = load_catalog("lab")
    assert [f.name for f in select_factors(cat, ["kubeAPIQPS"])] == ["kubeAPIQPS"]
    with pytest.raises(UserError, match="unknown factor 'Nope'"):
        select_factors(cat, ["Nope"])


BAD = {
    "malformed": ("catalog: x\nfactors: [\n", "malformed YAML"),
    "not a mapping": ("- a\n- b\n", "expected a mapping at the top level"),
    "unknown top key": ("catalog: x\nbogus: 1\nfactors: []\n", "bogus: unknown key"),
    "no factors": ("catalog: x\nfactors: []\n", "factors: expected a non-empty list"),
    "unknown factor key": (
        "catalog: x\nfactors:\n  - {name: A, kind: feature_gate, on: true, off: false, "
        "summary: s, colour: red}\n",
        "factors[0].colour: unknown key",
    ),
    "wrong type": (
        "catalog: x\nfactors:\n  - {name: A, kind: feature_gate, on: yes-please, off: false,"
        " summary: s}\n",
        "true or false",
    ),
    "bad kind": (
        "catalog: x\nfactors:\n  - {name: A, kind: sysctl, on: 1, off: 0, summary: s}\n",
        "unknown kind 'sysctl'",
    ),
    "bad gate name": (
        "catalog: x\nfactors:\n  - {name: 'A;rm -rf', kind: feature_gate, on: true, off: false,"
        " summary: s}\n",
        "invalid feature gate name",
    ),
    "missing summary": (
        "catalog: x\nfactors:\n  - {name: A, kind: feature_gate, on: true, off: false}\n",
        "factors[0].summary: missing required key",
    ),
    "same on and off": (
        "catalog: x\nfactors:\n  - {name: kubeAPIQPS, kind: config_field, on: 5, off: 5,"
        " summary: s}\n",
        "on and off values are the same",
    ),
    "duplicate": (
        "catalog: x\nfactors:\n  - {name: A, kind: feature_gate, on: true, off: false, summary: s}"
        "\n  - {name: A, kind: feature_gate, on: true, off: false, summary: s}\n",
        "duplicate factor 'A'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_catalog_gives_one_error_naming_file_and_field(tmp_path: Path, case: str) -> None:
    text, message = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_catalog(str(path))
    line = err.value.one_line()
    assert str(path) in line and message in line and "\n" not in line


def test_cli_bad_catalog_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("catalog: x\nfactors: [\n")
    proc = subprocess.run(
        [sys.executable, "-m", "abtest", "gates", "--list", "--catalog", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "malformed YAML" in lines[0]


def test_unknown_catalog_name() -> None:
    with pytest.raises(ConfigError, match=r"unknown catalog 'nope'.*agc, lab"):
        load_catalog("nope")
