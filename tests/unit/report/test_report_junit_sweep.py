"""`abtest report --format junit`: one test case per comparison, pass = interval excludes 0."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

from sweeps import build_sweep
from typer.testing import CliRunner

from abtest.app.report import build_model
from abtest.cli.main import app
from abtest.report.junit_sweep import case_name, verdict
from abtest.store.db import Store


def test_one_case_per_comparison_with_the_interval_verdict(store: Store, tmp_path: Path) -> None:
    run_id = build_sweep(store)
    model = build_model(store, run_id)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["report", run_id, "--format", "junit", "--out", str(out), "--db", str(store.path)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["report.junit.xml"]
    suite = ET.parse(out / "report.junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len(model.comparisons) > 0
    by_name = {c.get("name"): c for c in cases}
    kinds = {"passed": 0, "failure": 0, "skipped": 0}
    for comparison in model.comparisons:
        case = by_name[case_name(comparison)]
        kind, _ = verdict(comparison)
        kinds[kind] += 1
        ci = comparison.savings_ci
        if kind == "passed":
            assert ci is not None and (ci[0] > 0 or ci[1] < 0)
            assert case.find("failure") is None and "excludes 0" in (
                case.findtext("system-out") or ""
            )
        elif kind == "failure":
            assert ci is not None and ci[0] <= 0 <= ci[1]
            failure = case.find("failure")
            assert failure is not None and "includes 0" in failure.get("message", "")
        else:
            assert ci is None or not all(math.isfinite(x) for x in ci)
            assert case.find("skipped") is not None
    assert suite.get("tests") == str(len(cases))
    assert suite.get("failures") == str(kinds["failure"])
    assert suite.get("skipped") == str(kinds["skipped"])


def test_junit_is_not_written_unless_asked(store: Store, tmp_path: Path) -> None:
    run_id = build_sweep(store)
    out = tmp_path / "all"
    result = CliRunner().invoke(app, ["report", run_id, "--out", str(out), "--db", str(store.path)])
    assert result.exit_code == 0, result.output
    assert not (out / "report.junit.xml").exists()
