"""Issue 11, items 11, 13-15 at the `abtest regress` surface: usage errors exit 2, a missing
interval says why, the JSON keeps what the decision was made from, and the rounds CSV refuses
what would silently shrink an interval."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from bad_input import Outcome
from cli_run import run

from abtest.engine.regress_rounds import rounds_of_two_runs
from abtest.errors import NO_VARIATION, UserError
from abtest.report.verdict import describe, markdown_summary
from abtest.stats import regression_decision
from abtest.stats.regress_result import RegressResult
from abtest.store.db import Store

REF = [4.00, 4.32, 3.80, 4.12, 3.88, 4.20]
WOBBLE = [1.004, 0.997, 1.002, 0.996, 1.003, 0.998]


def _csv(path: Path, ratio: float = 1.0, wobble: bool = True, extra: str = "") -> Path:
    lines = ["arm,size,block,batch_ready_s,p95_s"]
    for b, ref in enumerate(REF):
        cand = ref * ratio * (WOBBLE[b] if wobble else 1.0)
        lines.append(f"ref,150,{b},{ref!r},{ref * 0.9!r}")
        lines.append(f"cand,150,{b},{cand!r},{cand * 0.9!r}")
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


Regress = Callable[..., Outcome]


@pytest.fixture
def regress(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Regress:
    """``abtest regress ARGS``, in-process (tests/cli_run.py)."""
    return lambda *args: run(["regress", *args], capsys, monkeypatch)


# ---------------------------------------------------------------- item 11


def test_same_arm_as_reference_and_candidate_is_a_usage_error(
    tmp_path: Path, regress: Regress
) -> None:
    data = _csv(tmp_path / "rounds.csv")
    proc = regress("--csv", str(data), "--reference", "cand", "--candidate", "cand", "--json")
    assert proc.code == 2, proc.out + proc.err
    assert "same arm" in proc.err and "--candidate" in proc.err
    assert "PASS" not in proc.out


def test_same_stored_run_on_both_sides_is_refused(store: Store) -> None:
    with pytest.raises(UserError, match="same run") as err:
        rounds_of_two_runs(store, "run-1", "run-1")
    assert "--candidate-run" in err.value.one_line()


# ---------------------------------------------------------------- item 15


@pytest.mark.parametrize("margin", ["-5", "nan", "inf"])
def test_margin_is_refused_on_the_cli_by_the_playbook_rule(
    tmp_path: Path, margin: str, regress: Regress
) -> None:
    data = _csv(tmp_path / "rounds.csv")
    proc = regress(
        "--csv", str(data), "--reference", "ref", "--candidate", "cand", f"--margin={margin}"
    )
    assert proc.code == 2, proc.out + proc.err
    assert "--margin" in proc.err and "margin" in proc.err


def test_playbook_margin_uses_the_same_rule(tmp_path: Path) -> None:
    from abtest.config.playbook import parse_playbook

    path = tmp_path / "pb.yaml"
    path.write_text("playbook: x\ncatalog: lab\nmargin_pct: -1\n")
    with pytest.raises(UserError, match="negative") as err:
        parse_playbook(path)
    assert "margin_pct" in err.value.one_line()


# ---------------------------------------------------------------- item 13


def test_json_keeps_note_method_p_value_and_pairs(tmp_path: Path, regress: Regress) -> None:
    data = _csv(tmp_path / "rounds.csv", ratio=1.0)
    proc = regress("--csv", str(data), "--reference", "ref", "--candidate", "cand", "--json")
    assert proc.code == 0, proc.out + proc.err
    decision = json.loads(proc.out)["decisions"][0]
    assert decision["method"] == "paired" and decision["n_pairs"] == 6
    assert 0.0 <= decision["p_value"] <= 1.0
    assert decision["note"] == ""
    assert decision["decisions"] == 2


def test_constant_ratio_is_inconclusive_and_says_there_is_no_variation(
    tmp_path: Path, regress: Regress
) -> None:
    data = _csv(tmp_path / "rounds.csv", ratio=1.02, wobble=False)
    proc = regress("--csv", str(data), "--reference", "ref", "--candidate", "cand", "--json")
    assert proc.code == 3, proc.out + proc.err
    for decision in json.loads(proc.out)["decisions"]:
        assert decision["slowdown_ci"] is None and decision["p_value"] is None
        assert NO_VARIATION in decision["note"]
    text = regress("--csv", str(data), "--reference", "ref", "--candidate", "cand")
    assert "no variation between rounds" in text.out
    assert "n too small" not in text.out


def test_text_gives_the_real_reason_for_no_interval() -> None:
    import pandas as pd

    one_pair = pd.DataFrame(
        {"arm": ["r", "c"], "size": 50, "block": [1, 1], "batch_ready_s": [2.0, 2.1]}
    )
    small = regression_decision(
        one_pair, reference="r", candidate="c", size=50, metric="batch_ready_s", margin_pct=5
    )
    flat = regression_decision(
        pd.DataFrame(
            {
                "arm": ["r", "r", "c", "c"],
                "size": 50,
                "block": [1, 2, 1, 2],
                "batch_ready_s": [2.0137, 4.0291, 2.0137, 4.0291],  # off any coarse grid
            }
        ),
        reference="r",
        candidate="c",
        size=50,
        metric="batch_ready_s",
        margin_pct=5,
    )
    assert "too few" in describe(small) or "fewer than 2" in describe(small)
    assert "no variation" not in describe(small)
    assert "no variation" in describe(flat) and "n too small" not in describe(flat)
    summary = markdown_summary(RegressResult((small, flat), "INCONCLUSIVE", 1, 1, 2, "test"))
    assert "no variation" in summary and "fewer than 2" in summary


# ---------------------------------------------------------------- item 14 through regress


def test_duplicate_rounds_are_refused_by_regress_csv(tmp_path: Path, regress: Regress) -> None:
    body = "arm,size,batch_ready_s\n" + "".join(f"ref,150,{r}\ncand,150,{r * 1.01}\n" for r in REF)
    path = tmp_path / "rounds.csv"
    path.write_text(body + f"ref,150,{REF[0]}\n")
    proc = regress("--csv", str(path), "--reference", "ref", "--candidate", "cand")
    assert proc.code == 2, proc.out + proc.err
    assert "duplicate" in proc.err and "line 2" in proc.err and "line 14" in proc.err


def test_empty_cell_in_a_metric_not_asked_for_is_fine(tmp_path: Path, regress: Regress) -> None:
    data = _csv(tmp_path / "rounds.csv", ratio=1.0)
    lines = data.read_text().splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + ","  # an empty p95_s cell
    data.write_text("\n".join(lines) + "\n")
    ok = regress(
        "--csv", str(data), "--reference", "ref", "--candidate", "cand", "--metric", "batch_ready_s"
    )
    assert ok.code == 0, ok.out + ok.err
    asked = regress(
        "--csv", str(data), "--reference", "ref", "--candidate", "cand", "--metric", "p95_s"
    )
    assert asked.code == 2 and "line 4, column p95_s" in asked.err


def test_live_gate_refuses_the_same_node_state_on_both_sides() -> None:
    from abtest.config.playbook import load_playbook
    from abtest.engine.regress_live import LiveRegressOptions, build_regress_plan

    def options(reference: str, candidate: str) -> LiveRegressOptions:
        return LiveRegressOptions(
            profile="lab",
            playbook=load_playbook("lab-regression"),
            reference=reference,
            candidate=candidate,
            sizes=(10,),
            metrics=("batch_ready_s",),
            margin_pct=5.0,
            confidence=0.95,
            rounds=3,
            max_rounds=9,
            seed=1,
        )

    for reference, candidate in (
        ("default", "default"),
        ("kubeAPIQPS=3,featureGates.X=true", "featureGates.X=true, kubeAPIQPS=3"),
    ):
        with pytest.raises(UserError, match="same node state") as err:
            build_regress_plan(options(reference, candidate), 3)
        assert "--candidate" in err.value.one_line()


# ---------------------------------------------------------------- issue 37: plan, settle


def _pilot(path: Path, noise: float, blocks: int = 12) -> Path:
    rng = np.random.default_rng(3)
    lines = ["arm,size,block,batch_ready_s,p95_s"]
    for b in range(blocks):
        drift = rng.normal(0, 0.05)
        for arm in ("ref", "cand"):
            x = 5.5 * float(np.exp(drift + rng.normal(0, noise)))
            lines.append(f"{arm},10,{b},{x:.4f},{x * 1.1:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plan_from_a_pilot_prints_both_rates_and_what_would_reach_the_target(
    tmp_path: Path, regress: Regress
) -> None:
    pilot = _pilot(tmp_path / "pilot.csv", noise=0.05)
    args = ["--plan", "--playbook", "lab-regression", "--csv", str(pilot),
            "--reference", "ref", "--candidate", "cand"]  # fmt: skip
    proc = regress(*args)
    assert proc.code == 0, proc.err
    assert "an unchanged candidate PASSes" in proc.out and "FAILs" in proc.out
    assert "cannot reach 80%" in proc.out and "--max-rounds" in proc.out
    doc = json.loads(regress(*args, "--json").out)
    assert not doc["reaches_target"] and doc["looks"] == [3, 6, 9]
    assert 0 <= doc["pass_if_unchanged"] < 0.8 and doc["noise"][0]["source"].startswith("history")
    # 24 paired rounds: the rates are simulated from them (issue 37 §4), and it says so
    assert doc["rates_from"] == ["the pilot's 24 rounds in 1 run(s)"] * 2
    assert "rates from the gate's own rule on simulated rounds" in proc.out
    # how sure it is (issue 46): the noise's 11 df, both rates' 90 % intervals around them
    assert (
        "how sure: 90% intervals, from the uncertainty of the noise measured on 11 df" in proc.out
    )
    sure = doc["interval"]
    assert sure["level"] == 0.9 and sure["noise_df"] == 11 and sure["why_none"] == ""
    lo, hi = sure["pass_if_unchanged"]
    assert lo <= doc["pass_if_unchanged"] <= hi and hi - lo > 0.1
    lo, hi = sure["fail_if_twice_margin"]
    assert lo <= doc["fail_if_twice_margin"] <= hi


def test_plan_says_when_the_data_are_coarse(tmp_path: Path, regress: Regress) -> None:
    lines = ["arm,size,block,batch_ready_s"]
    for b, (r, c) in enumerate([(5, 6), (6, 6), (5, 5), (6, 7), (5, 6), (6, 6)]):
        lines += [f"ref,10,{b},{r}", f"cand,10,{b},{c}"]
    path = tmp_path / "whole.csv"
    path.write_text("\n".join(lines) + "\n")
    proc = regress("--plan", "--playbook", "lab-regression", "--csv", str(path), "--reference",
                    "ref", "--candidate", "cand", "--metric", "batch_ready_s")  # fmt: skip
    assert proc.code == 0, proc.err
    assert "coarse data: batch_ready_s at 10 pods (1 s grid)" in proc.out
    assert "the normal model's rates" in proc.out  # 12 rounds: too few to simulate from


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--margin", "-5"], "negative"),
        (["--margin", "nan"], "not a finite number"),
        (["--margin", "1000"], "above 100 %"),
        (["--max-rounds", "10000"], "--max-rounds: 10000 blocks: --plan simulates every block"),
        (["--max-rounds", "10000"], "plans caps up to 200 blocks"),
        (["--confidence", "nan"], "--confidence: confidence nan is not between 0 and 1"),
        (["--confidence", "95"], "--confidence: confidence 95.0 is not between 0 and 1"),
    ],
)
def test_plan_checks_its_bounds_as_the_gate_does(
    tmp_path: Path, regress: Regress, flags: list[str], says: str
) -> None:
    """Issue 46: --plan took --margin -5, nan and 1000, and ran for minutes at 10 000 blocks."""
    pilot = _pilot(tmp_path / "pilot.csv", noise=0.05)
    proc = regress("--plan", "--playbook", "lab-regression", "--csv", str(pilot),
                   "--reference", "ref", "--candidate", "cand", *flags)  # fmt: skip
    assert proc.code == 2 and says in proc.err and "Traceback" not in proc.err
    # one line, refused before the history is read (no noise lines before it)
    assert proc.err.strip().count("\n") == 0 and proc.out == ""


def test_plan_says_it_writes_no_junit(tmp_path: Path, regress: Regress) -> None:
    pilot = _pilot(tmp_path / "pilot.csv", noise=0.05)
    junit = tmp_path / "j.xml"
    proc = regress("--plan", "--playbook", "lab-regression", "--csv", str(pilot),
                   "--reference", "ref", "--candidate", "cand", "--junit", str(junit))  # fmt: skip
    assert proc.code == 0 and "no --junit file written" in proc.err and not junit.exists()


def test_plan_needs_a_node_or_a_pilot(regress: Regress) -> None:
    proc = regress("--plan")
    assert proc.code == 2 and "--plan needs the node" in proc.err
    assert "Traceback" not in proc.err


def test_an_inconclusive_verdict_says_what_more_would_settle_it(
    tmp_path: Path, regress: Regress
) -> None:
    path = _csv(tmp_path / "r.csv", ratio=1.048)  # +4.8 % against a 5 % margin
    junit = tmp_path / "j.xml"
    proc = regress("--csv", str(path), "--reference", "ref", "--candidate", "cand",
                    "--junit", str(junit), "--summary", str(tmp_path / "s.md"))  # fmt: skip
    assert proc.code == 3, proc.out + proc.err
    text = " ".join(proc.out.split())  # the console wraps long lines
    assert "to settle it: about" in text and "complete blocks in all" in text
    assert "to settle it: about" in junit.read_text()
    assert "What more would settle" in (tmp_path / "s.md").read_text()
