"""kube-burner local-indexer runs read as rounds: same numbers and tables as the tidy CSV."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from abtest.cli.main import app
from abtest.errors import UserError
from abtest.ingest import load_foreign
from abtest.ingest.common import ArmGlob, parse_arm_globs
from abtest.ingest.kube_burner import RESOLUTION_NOTE, load_kube_burner
from abtest.ingest.rounds_csv import load_rounds_csv

FIXTURES = Path(__file__).parents[2] / "fixtures" / "kube-burner"
ARMS = [ArmGlob("baseline", "baseline/*"), ArmGlob("qps3", "qps3/*")]


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    shutil.copytree(FIXTURES, root)
    return root


def test_rounds_equal_the_hand_made_csv() -> None:
    got = load_kube_burner(FIXTURES, ARMS)
    want = load_rounds_csv(FIXTURES / "rounds.csv")
    pd.testing.assert_frame_equal(got.rounds, want)
    assert RESOLUTION_NOTE in got.notes


def test_blocks_follow_job_start_time_not_directory_names() -> None:
    rounds = load_kube_burner(FIXTURES, ARMS).rounds
    # The 10:00 baseline run (directory 7f3c..., second by name) is block 1: batch ready 3 s.
    first = rounds[(rounds["arm"] == "baseline") & (rounds["block"] == "1")]
    assert first["batch_ready_s"].tolist() == [3.0]


def test_block_from_a_summary_field(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    for i, summary in enumerate(sorted(root.glob("*/*/jobSummary.json"))):
        docs = json.loads(summary.read_text())
        docs[0]["pair"] = f"p{i % 3}"
        summary.write_text(json.dumps(docs))
    rounds = load_kube_burner(root, ARMS, block_field="pair").rounds
    assert sorted(rounds["block"]) == ["p0", "p0", "p1", "p1", "p2", "p2"]


def test_churn_pods_and_failed_jobs_are_left_out(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    summary = next(root.glob("qps3/collected-metrics-5d6e*/jobSummary.json"))
    docs = json.loads(summary.read_text())
    docs[0]["passed"] = False
    summary.write_text(json.dumps(docs))
    got = load_kube_burner(root, ARMS)
    assert len(got.rounds) == 5
    assert any("did not pass" in n for n in got.notes)
    # The baseline 10:00 run has a churn pod at 30 s: it is not the batch's slowest pod.
    assert got.rounds["batch_ready_s"].max() == 9.0


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not JSON"),
        ('{"metricName": "podLatencyMeasurement"}', "not a non-empty JSON array"),
        ('[{"metricName": "jobSummary"}]', "is not a podLatencyMeasurement document"),
        (
            '[{"metricName": "podLatencyMeasurement", "podName": "x", "podReadyLatency": "1s"}]',
            "podReadyLatency '1s'",
        ),
    ],
)
def test_a_malformed_pod_file_is_one_error_naming_it(
    tmp_path: Path, content: str, fragment: str
) -> None:
    root = _copy(tmp_path)
    bad = next(root.glob("qps3/collected-metrics-e5a1*/podLatencyMeasurement-*.json"))
    bad.write_text(content)
    with pytest.raises(UserError) as info:
        load_kube_burner(root, ARMS)
    assert str(bad) in str(info.value)
    assert fragment in str(info.value)
    assert "expected kube-burner's local-indexer podLatencyMeasurement file" in str(info.value)


def test_a_foreign_summary_is_one_error(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    bad = next(root.glob("baseline/collected-metrics-1a9e*/jobSummary.json"))
    bad.write_text('{"version": "1.0", "dataItems": []}')
    with pytest.raises(UserError, match="jobSummary"):
        load_kube_burner(root, ARMS)


def test_zero_latency_rounds_are_refused_with_the_reason(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    pods = next(root.glob("qps3/collected-metrics-e5a1*/podLatencyMeasurement-*.json"))
    docs = json.loads(pods.read_text())
    for doc in docs:
        doc["podReadyLatency"] = 0
    pods.write_text(json.dumps(docs))
    with pytest.raises(UserError, match="one-second timestamps"):
        load_kube_burner(root, ARMS)


def test_arm_options_are_checked() -> None:
    with pytest.raises(UserError, match="NAME=GLOB"):
        parse_arm_globs(["baseline"], "--kube-burner")
    with pytest.raises(UserError, match="at least two"):
        parse_arm_globs(["a=x/*"], "--kube-burner")
    with pytest.raises(UserError, match="matches no directory"):
        load_kube_burner(FIXTURES, [ArmGlob("a", "baseline/*"), ArmGlob("b", "nothing-*")])
    with pytest.raises(UserError, match="matches both"):
        load_kube_burner(FIXTURES, [ArmGlob("a", "baseline/*"), ArmGlob("b", "*/*")])
    with pytest.raises(UserError, match="go with --kube-burner"):
        load_foreign(None, None, ["a=b"])


def _tables(output: str) -> str:
    # Everything the two sources share: the tables and the method lines, not the source notes.
    return output.split("\nnote: ")[0].rstrip()


def test_analyze_prints_the_same_tables_as_on_the_csv() -> None:
    runner = CliRunner()
    from_csv = runner.invoke(app, ["analyze", str(FIXTURES / "rounds.csv")])
    from_kb = runner.invoke(
        app,
        [
            "analyze",
            "--kube-burner",
            str(FIXTURES),
            "--arm",
            "baseline=baseline/*",
            "--arm",
            "qps3=qps3/*",
        ],
    )
    assert from_csv.exit_code == 0, from_csv.output
    assert from_kb.exit_code == 0, from_kb.output
    assert "qps3" in from_csv.output
    assert _tables(from_kb.output) == _tables(from_csv.output)
    assert "one-second resolution" in from_kb.output


def test_analyze_json_from_kube_burner_equals_the_csv() -> None:
    runner = CliRunner()
    args = ["--arm", "baseline=baseline/*", "--arm", "qps3=qps3/*", "--json"]
    from_kb = runner.invoke(app, ["analyze", "--kube-burner", str(FIXTURES), *args])
    from_csv = runner.invoke(app, ["analyze", str(FIXTURES / "rounds.csv"), "--json"])
    assert from_kb.exit_code == 0, from_kb.output
    kb = json.loads(from_kb.stdout)
    csv = json.loads(from_csv.stdout)
    assert kb["comparisons"] == csv["comparisons"]


def test_analyze_malformed_file_exits_2_naming_it(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    bad = next(root.glob("baseline/collected-metrics-c2d8*/jobSummary.json"))
    bad.write_text("[]")
    args = ["analyze", "--kube-burner", str(root), "--arm", "b=baseline/*", "--arm", "q=qps3/*"]
    # Through the real entry point: it is main() that turns a UserError into one line, exit 2.
    done = subprocess.run(
        [sys.executable, "-c", "from abtest.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "expected kube-burner's" in lines[0]


def test_regress_reads_kube_burner() -> None:
    result = CliRunner().invoke(
        app,
        [
            "regress",
            "--kube-burner",
            str(FIXTURES),
            "--arm",
            "baseline=baseline/*",
            "--arm",
            "qps3=qps3/*",
            "--reference",
            "baseline",
            "--candidate",
            "qps3",
            "--metric",
            "batch_ready_s",
            "--json",
        ],
    )
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] in {"FAIL", "INCONCLUSIVE"}
    assert "kube-burner" in verdict["source"]
    assert result.exit_code in (1, 3)


def test_another_latency_field_feeds_the_metrics() -> None:
    # The fixtures' readyToStartContainersLatency is podReadyLatency - 1 s (never below 0).
    got = load_kube_burner(FIXTURES, ARMS, latency="readyToStartContainersLatency").rounds
    want = load_rounds_csv(FIXTURES / "rounds.csv")
    for metric in ("batch_ready_s", "p99_s"):
        assert (got[metric] == want[metric] - 1.0).all()
    with pytest.raises(UserError, match="unknown kube-burner latency 'podLatency'"):
        load_kube_burner(FIXTURES, ARMS, latency="podLatency")


def test_latency_option_on_analyze() -> None:
    result = CliRunner().invoke(
        app,
        [
            "analyze",
            "--kube-burner",
            str(FIXTURES),
            "--arm",
            "baseline=baseline/*",
            "--arm",
            "qps3=qps3/*",
            "--latency",
            "containersReadyLatency",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["notes"]
    assert any("containersReadyLatency" in n for n in notes)
