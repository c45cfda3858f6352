"""clusterloader2 PodStartupLatency reports read as rounds (p50_s, p99_s per file)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from abtest.cli.main import app
from abtest.errors import UserError
from abtest.ingest.clusterloader2 import load_clusterloader2
from abtest.ingest.common import ArmGlob
from abtest.ingest.rounds_csv import load_rounds_csv

FIXTURES = Path(__file__).parents[2] / "fixtures" / "clusterloader2"
ARMS = [ArmGlob("baseline", "baseline-*"), ArmGlob("qps3", "qps3-*")]


def test_rounds_equal_the_hand_made_csv() -> None:
    got = load_clusterloader2(FIXTURES, ARMS, size=20)
    pd.testing.assert_frame_equal(got.rounds, load_rounds_csv(FIXTURES / "rounds.csv"))
    assert "no P95" in got.notes[0]


def test_size_is_required() -> None:
    with pytest.raises(UserError, match="--size"):
        load_clusterloader2(FIXTURES, ARMS, size=None)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("[]", "no dataItems list"),
        ('{"version": "1.0", "dataItems": []}', "no data item with labels.Metric 'pod_startup'"),
        (
            '{"dataItems": [{"data": {"Perc50": 0}, "unit": "ms", '
            '"labels": {"Metric": "pod_startup"}}]}',
            "Perc50 is 0",
        ),
        ("<html>", "not JSON"),
    ],
)
def test_a_malformed_report_is_one_error_naming_it(
    tmp_path: Path, body: str, fragment: str
) -> None:
    root = tmp_path / "cl2"
    shutil.copytree(FIXTURES, root)
    bad = next((root / "qps3-2").glob("PodStartupLatency_*.json"))
    bad.write_text(body)
    with pytest.raises(UserError) as info:
        load_clusterloader2(root, ARMS, size=20)
    assert str(bad) in str(info.value) and fragment in str(info.value)


def test_a_renamed_file_without_its_time_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cl2"
    shutil.copytree(FIXTURES, root)
    path = next((root / "baseline-1").glob("PodStartupLatency_*.json"))
    path.rename(path.with_name("PodStartupLatency_mine.json"))
    with pytest.raises(UserError, match="RFC 3339"):
        load_clusterloader2(root, ARMS, size=20)


def test_analyze_json_equals_the_csv() -> None:
    runner = CliRunner()
    args = ["--arm", "baseline=baseline-*", "--arm", "qps3=qps3-*", "--size", "20", "--json"]
    from_cl2 = runner.invoke(app, ["analyze", "--clusterloader2", str(FIXTURES), *args])
    from_csv = runner.invoke(app, ["analyze", str(FIXTURES / "rounds.csv"), "--json"])
    assert from_cl2.exit_code == 0, from_cl2.output
    assert json.loads(from_cl2.stdout)["comparisons"] == json.loads(from_csv.stdout)["comparisons"]
