"""`abtest regress --csv`: constructed rounds for each verdict give the exact exit code,
and the JUnit XML parses back with one testcase per size x metric."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_input import Outcome
from cli_run import run

from abtest.engine.regress_rounds import look_schedule

# Per-block multiplicative noise the reference and candidate share (block effect) plus a
# small round-level wobble, fixed so the verdicts are exact.
BLOCK = [1.00, 1.08, 0.95, 1.03, 0.97, 1.05, 0.99, 1.02]
WOBBLE = [0.004, -0.003, 0.002, -0.004, 0.003, -0.002, 0.001, -0.001]


def _csv(path: Path, slowdown: float, wobble_scale: float) -> Path:
    lines = ["arm,size,block,batch_ready_s,p95_s"]
    for b, (blk, w) in enumerate(zip(BLOCK, WOBBLE, strict=True)):
        ref = 4.0 * blk
        cand = ref * (1 + slowdown) * (1 + w * wobble_scale)
        lines.append(f"ref,150,{b},{ref:.4f},{ref * 0.9:.4f}")
        lines.append(f"cand,150,{b},{cand:.4f},{cand * 0.9:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def regress(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Outcome]:
    """``abtest regress ARGS``, in-process (tests/cli_run.py)."""
    return lambda *args: run(["regress", *args], capsys, monkeypatch)


@pytest.mark.parametrize(
    ("slowdown", "wobble", "verdict", "code"),
    [(0.0, 1, "PASS", 0), (0.20, 1, "FAIL", 1), (0.05, 30, "INCONCLUSIVE", 3)],
)
def test_each_verdict_has_its_exit_code(
    tmp_path: Path,
    slowdown: float,
    wobble: float,
    verdict: str,
    code: int,
    regress: Callable[..., Outcome],
) -> None:
    data = _csv(tmp_path / "rounds.csv", slowdown, wobble)
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    proc = regress(
        "--csv",
        str(data),
        "--reference",
        "ref",
        "--candidate",
        "cand",
        "--junit",
        str(junit),
        "--summary",
        str(summary),
    )
    assert proc.code == code, proc.out + proc.err
    assert f"verdict: {verdict}" in proc.out
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "2"
    cases = suite.findall("testcase")
    assert sorted(c.get("name") or "" for c in cases) == [
        "batch_ready_s @ 150 pods",
        "p95_s @ 150 pods",
    ]
    failures = [c for c in cases if c.find("failure") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert len(failures) == (2 if verdict == "FAIL" else 0)
    assert len(skipped) == (2 if verdict == "INCONCLUSIVE" else 0)
    if failures:
        message = failures[0].find("failure").get("message")  # type: ignore[union-attr]
        assert "slowdown +20.0 %" in (message or "") and "margin 5 %" in (message or "")
    text = summary.read_text()
    assert text.startswith("## abtest regress") and verdict in text and "| 150 |" in text


def test_usage_errors_exit_2(tmp_path: Path, regress: Callable[..., Outcome]) -> None:
    data = _csv(tmp_path / "rounds.csv", 0.0, 1)
    assert regress("--csv", str(data), "--reference", "ref").code == 2
    assert regress("--csv", str(data), "--reference", "ref", "--candidate", "nope").code == 2
    assert (
        regress("--csv", str(tmp_path / "missing.csv"), "--reference", "a", "--candidate", "b").code
        == 2
    )
    both = regress("--csv", str(data), "--profile", "lab", "--reference", "a", "--candidate", "b")
    assert both.code == 2 and "choose one source" in both.err


def test_look_schedule_is_fixed_in_advance() -> None:
    assert look_schedule(5, 20) == [5, 10, 15, 20]
    assert look_schedule(5, 12) == [5, 10, 12]
    assert look_schedule(3, 3) == [3]
