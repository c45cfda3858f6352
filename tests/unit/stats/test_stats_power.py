"""Planning by power (issue 15 section 3): the MDE and blocks-needed arithmetic, the noise
estimate from a node's history, `abtest plan --detect`, and the MDE in every report format."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_run import run
from sweeps import SweepSpec, build_sweep

from abtest.app.report import build_model
from abtest.config.plan_options import PlanOptions
from abtest.engine.prior_runs import noise_history
from abtest.engine.sweep_plan import build_plan, parse_percent, power_plan
from abtest.errors import UserError
from abtest.report import build_tables, render_markdown
from abtest.report.fmt import SENSITIVITY_HEADER, SENSITIVITY_NOTE
from abtest.report.html import render_html
from abtest.report.tidy import to_json
from abtest.stats import Pair, compare_pair
from abtest.stats.power import (
    DEFAULT_SD_LOG_DIFF,
    achieved,
    blocks_needed,
    detectable,
    mde_log,
    noise_from_history,
    paired_power,
)
from abtest.stats.power_sim import plan_from_rounds
from abtest.stats.round_model import round_model
from abtest.store.db import Store


def test_mde_matches_the_published_paired_t_table() -> None:
    # G*Power, paired t, two-tailed alpha 0.05, power 0.8: n = 10 -> dz = 0.996; dz = 0.5 needs
    # n = 34 (actual power 0.8078)
    assert mde_log(1.0, 10, 0.95) == pytest.approx(0.9962, abs=2e-4)
    assert paired_power(0.5, 1.0, 34, 0.95) == pytest.approx(0.8078, abs=2e-4)
    assert blocks_needed(1.0, math.expm1(0.5) * 100, 0.95) == 34
    # large n: the normal approximation (z_0.975 + z_0.8) * sd / sqrt(n)
    assert mde_log(0.1, 5000, 0.95) == pytest.approx(2.8016 * 0.1 / math.sqrt(5000), rel=1e-3)


def test_power_at_the_mde_is_the_target_and_grows_with_the_effect() -> None:
    for n in (2, 3, 5, 10, 40):
        d = mde_log(0.08, n, 0.95)
        assert paired_power(d, 0.08, n, 0.95) == pytest.approx(0.8, abs=1e-6)
        assert paired_power(d * 1.2, 0.08, n, 0.95) > 0.8 > paired_power(d * 0.8, 0.08, n, 0.95)
    assert mde_log(0.08, 1, 0.95) == math.inf
    # a stricter level needs a larger effect
    assert mde_log(0.08, 10, 0.99) > mde_log(0.08, 10, 0.95)


def test_mde_percent_covers_both_directions() -> None:
    found = detectable(0.1, 5, 0.95)
    assert found.mde_pct == pytest.approx((math.exp(found.mde_log) - 1) * 100)
    # a reduction of mde_pct is a larger log effect than the MDE: detected at least as often
    reduction = -math.log(1 - found.mde_pct / 100)
    assert reduction > found.mde_log


def test_blocks_needed_is_the_smallest_enough() -> None:
    for sd, pct in ((0.1, 10.0), (0.05, 5.0), (0.2, 30.0)):
        n = blocks_needed(sd, pct, 0.95)
        assert n is not None and n >= 2
        effect = math.log1p(pct / 100)
        assert paired_power(effect, sd, n, 0.95) >= 0.8
        assert n == 2 or paired_power(effect, sd, n - 1, 0.95) < 0.8
    assert blocks_needed(0.5, 0.1, 0.95) is None  # out of reach within 10 000 blocks
    with pytest.raises(UserError, match="cannot be planned"):
        blocks_needed(0.1, 0.0, 0.95)


def test_parse_percent() -> None:
    assert parse_percent("5%", "--detect") == 5.0
    assert parse_percent(" 12.5 ", "--detect") == 12.5
    for bad in ("x", "0%", "100", "-3%"):
        with pytest.raises(UserError):
            parse_percent(bad, "--detect")


def _history(sd_resid: float, runs: int, blocks: int, arms: int, seed: int) -> pd.DataFrame:
    """Earlier runs with real arm effects and block drift on top of residual noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(runs):
        arm_effect = rng.normal(0, 0.3, arms)
        for b in range(blocks):
            drift = rng.normal(0, 0.2)
            for a in range(arms):
                value = math.exp(1.0 + arm_effect[a] + drift + rng.normal(0, sd_resid))
                rows.append({"group": f"run{r}", "block": b, "arm": f"a{a}", "size": 20,
                             "batch_ready_s": value})  # fmt: skip
    return pd.DataFrame(rows)


def test_noise_from_history_recovers_the_paired_sd_despite_arm_and_block_effects() -> None:
    history = _history(0.05, runs=6, blocks=8, arms=4, seed=3)
    noise = noise_from_history(history, metric="batch_ready_s", size=20)
    assert noise.from_history and noise.df == 6 * 7 * 3 and noise.n_runs == 6
    # true SD of a within-block log difference: sqrt(2) * 0.05
    assert noise.sd_log_diff == pytest.approx(math.sqrt(2) * 0.05, rel=0.12)


def test_two_arms_noise_is_the_sd_of_paired_log_differences() -> None:
    history = _history(0.07, runs=1, blocks=9, arms=2, seed=4)
    noise = noise_from_history(history, metric="batch_ready_s", size=20)
    wide = history.pivot(index="block", columns="arm", values="batch_ready_s")
    diffs = np.log(wide["a1"]) - np.log(wide["a0"])
    assert noise.sd_log_diff == pytest.approx(float(diffs.std(ddof=1)), rel=1e-9)


def test_no_history_says_so_and_uses_the_stated_default() -> None:
    empty = _history(0.05, runs=1, blocks=1, arms=3, seed=5)  # one block: nothing paired
    noise = noise_from_history(empty, metric="batch_ready_s", size=20)
    assert not noise.from_history and noise.sd_log_diff == DEFAULT_SD_LOG_DIFF
    assert noise.source.startswith("default")
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=5, sizes=(10,)))
    rows = power_plan(plan, None, detect_pct=10.0)
    assert {r.noise.source.split(":")[0] for r in rows} == {"default"}
    assert all(r.blocks == 5 and r.mde_pct == pytest.approx(18.32, abs=0.05) for r in rows)
    assert all(r.blocks_needed == blocks_needed(0.1, 10.0, 0.95) for r in rows)


def test_achieved_mde_is_the_runs_own_paired_noise() -> None:
    rng = np.random.default_rng(11)
    n = 6
    base = np.exp(rng.normal(1.0, 0.2, n))
    treat = base * np.exp(rng.normal(0.0, 0.06, n))
    frame = pd.DataFrame({"arm": ["b"] * n + ["t"] * n, "size": 10, "block": [*range(n)] * 2,
                          "batch_ready_s": [*base, *treat]})  # fmt: skip
    c = compare_pair(frame, Pair("b", "t", 10, "batch_ready_s"))
    found = achieved(c)
    assert found is not None and found.n_blocks == n
    sd = float(np.std(np.log(treat) - np.log(base), ddof=1))
    assert found.sd_log_diff == pytest.approx(sd, rel=1e-9)
    assert found.mde_log == pytest.approx(mde_log(sd, n, 0.95), rel=1e-9)
    unpaired = compare_pair(frame.drop(columns="block"), Pair("b", "t", 10, "batch_ready_s"))
    assert achieved(unpaired) is None


def test_report_carries_the_achieved_mde_in_every_format(store: Store) -> None:
    run_id = build_sweep(store, SweepSpec())
    model = build_model(store, run_id)
    null = next(
        c for c in model.comparisons_for("batch_ready_s")
        if c.pct_ci is not None and c.pct_ci[0] < 0 < c.pct_ci[1]
    )  # fmt: skip
    clear = next(c for c in model.comparisons_for("batch_ready_s", "+kubeAPIQPS"))
    found = model.detectable_for(null)
    assert found is not None and found.n_blocks == null.n_pairs
    tables = build_tables(model)
    savings = tables.savings[0]
    # Issue 26: the MDE is the run's sensitivity, shown as such; it used to read "< X if any"
    # beside an interval reaching past X, as if it bounded the effect. Now never a bound.
    column = savings.columns.index(SENSITIVITY_HEADER)
    cells = {(r[0], r[1]): r[column] for r in savings.rows}
    assert cells[(str(null.size), null.arm)] == f"{found.mde_pct:.1f}"
    clear_found = model.detectable_for(clear)
    assert clear_found is not None
    assert cells[(str(clear.size), clear.arm)] == f"{clear_found.mde_pct:.1f}"
    assert SENSITIVITY_NOTE in savings.notes and "not a bound" in SENSITIVITY_NOTE
    markdown = render_markdown(model)
    html = render_html(model, figures=[])
    for text in (markdown, html):
        assert SENSITIVITY_HEADER in text and "if any" not in text
    assert f"| {SENSITIVITY_HEADER} |" in markdown
    doc = to_json(model)
    row = next(
        r for r in doc["comparisons"]
        if (r["arm"], r["size"], r["metric"]) == (null.arm, null.size, null.metric)
    )  # fmt: skip
    assert row["mde_pct"] == pytest.approx(found.mde_pct) and row["mde_power"] == 0.8
    json.dumps(doc, allow_nan=False)


def test_plan_cli_answers_detect_from_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "results.sqlite"
    with Store(db) as store:
        for i in range(3):
            build_sweep(
                store,
                SweepSpec(run_id=f"sweep-20251201-000{i + 1}", seed=100 + i, sizes=(10, 20),
                          warmup=None, rejected=None),
            )  # fmt: skip
        with store.transaction() as conn:  # the fixture's node is the lab playbook's
            conn.execute("UPDATE rounds SET node_name = 'abtest-lab'")
        history = noise_history(store, "abtest-lab", (10, 20))
    assert set(history["group"]) == {f"sweep-20251201-000{i + 1}" for i in range(3)}
    env = {"ABTEST_DB": str(db), "COLUMNS": "200"}
    args = ["plan", "--playbook", "lab-sweep", "--sizes", "10,20", "--rounds", "5"]
    proc = run([*args, "--detect", "10%", "--json"], capsys, monkeypatch, env=env)
    assert proc.code == 0, proc.err
    power = json.loads(proc.out)["power"]
    assert {(p["metric"], p["size"]) for p in power} == {
        (m, s) for m in ("batch_ready_s", "p95_s") for s in (10, 20)
    }
    for p in power:
        assert p["noise_source"].startswith("history") and p["noise_df"] > 0
        noise = noise_from_history(history, metric=p["metric"], size=p["size"])
        assert p["sd_log_diff"] == pytest.approx(noise.sd_log_diff, abs=1e-5)
        # enough paired rounds: power, MDE and blocks simulated from them (issue 37 §4)
        model = round_model(history, metric=p["metric"], size=p["size"])
        assert model is not None and p["simulated"] and p["power_model"] == model.source
        sim = plan_from_rounds(model, 5, 0.95, 10.0)
        assert p["blocks_needed"] == sim.blocks_needed and p["blocks_cap"] == 100
        assert p["power_at_detect"] == pytest.approx(sim.power_at, abs=1e-3)
        assert p["mde_pct"] == pytest.approx(sim.mde_pct, abs=0.01)
        # how sure (issue 46): the power's 90 % interval, none on tick-ended rounds
        if sim.power_interval is None:
            assert p["power_at_detect_interval"] is None and model.tick > 0
        else:
            assert p["power_at_detect_interval"] == pytest.approx(sim.power_interval, abs=1e-3)
    text = run([*args, "--detect", "10%"], capsys, monkeypatch, env=env)
    assert text.code == 0, text.err
    assert "blocks for 10 %" in text.out and "power for 10 %" in text.out
    assert all(p["power_at_detect_interval"] for p in power)  # continuous rounds: all four
    assert "in brackets its 90 % interval from the uncertainty" in text.out
    assert "this node's" in text.out and "simulated from its earlier rounds" in text.out
    assert "default" not in text.out.split("MDE:")[0]


def test_too_short_a_history_plans_with_the_normal_model_and_says_so() -> None:
    """Under 20 paired rounds at a size the plan is the noncentral t on their noise, named."""
    history = _history(0.05, runs=1, blocks=4, arms=3, seed=8)  # 12 rounds
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=5, sizes=(20,)))
    rows = power_plan(plan, history, detect_pct=10.0, metrics=("batch_ready_s",))
    noise = noise_from_history(history, metric="batch_ready_s", size=20)
    assert [(r.simulated, r.model) for r in rows] == [(False, "normal model")]
    assert rows[0].blocks_needed == blocks_needed(noise.sd_log_diff, 10.0, 0.95)
    assert rows[0].power_at_detect == pytest.approx(
        paired_power(math.log1p(0.1), noise.sd_log_diff, 5, 0.95)
    )


def test_past_the_simulations_blocks_the_plan_uses_the_normal_model_and_says_so() -> None:
    """Issue 46: `abtest plan --rounds 1000` over several nodes simulated every block of the
    node's rounds for minutes; past MAX_SIM_BLOCKS the row is the normal model, named."""
    history = _history(0.05, runs=6, blocks=8, arms=4, seed=3)
    plan = build_plan(PlanOptions(playbook="lab-sweep", rounds=1000, sizes=(20,)))
    rows = power_plan(plan, history, detect_pct=10.0, metrics=("batch_ready_s",))
    assert [r.simulated for r in rows] == [False]
    assert rows[0].model == "normal model (1000 blocks: the node's rounds simulate up to 100)"
    noise = noise_from_history(history, metric="batch_ready_s", size=20)
    assert rows[0].blocks_needed == blocks_needed(noise.sd_log_diff, 10.0, 0.95)


def test_analyze_terminal_and_json_carry_the_achieved_mde(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = tmp_path / "rounds.csv"
    rounds.write_text(
        "arm,size,block,batch_ready_s\n"
        + "".join(f"baseline,10,{b},{v}\n" for b, v in enumerate((2.0, 2.2, 2.1, 2.3)))
        + "".join(f"fast,10,{b},{v}\n" for b, v in enumerate((1.9, 2.25, 2.0, 2.1)))
    )
    frame = pd.read_csv(rounds)
    c = compare_pair(frame, Pair("baseline", "fast", 10, "batch_ready_s"))
    found = achieved(c)
    assert found is not None and c.pct_ci is not None and c.pct_ci[0] < 0 < c.pct_ci[1]
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    base = ["analyze", str(rounds)]
    text = run(base, capsys, monkeypatch, env=env)
    assert text.code == 0, text.err
    # the sensitivity, worded as such, never "< X if any" (issue 26)
    assert "could detect % (80 % power)" in text.out and "if any" not in text.out
    assert f" {found.mde_pct:.1f} " in text.out and "Not a bound on the effect" in text.out
    as_json = run([*base, "--json"], capsys, monkeypatch, env=env)
    (row,) = json.loads(as_json.out)["comparisons"]
    assert row["mde_pct"] == pytest.approx(found.mde_pct)
    md = run([*base, "--format", "md"], capsys, monkeypatch, env=env)
    assert "| could detect % (80 % power) |" in md.out
    assert f"| {found.mde_pct:.1f} |" in md.out and "if any" not in md.out
    as_csv = run([*base, "--format", "csv"], capsys, monkeypatch, env=env)
    header, line = as_csv.out.splitlines()[:2]
    assert float(line.split(",")[header.split(",").index("mde_pct")]) == pytest.approx(
        found.mde_pct
    )


def test_two_blocks_that_disagree_at_a_strict_look_detect_nothing_rather_than_crash() -> None:
    # CI's A/A on the lab: two blocks (-31 % and +21 %) at the first look of a 0.999 gate; the
    # detectable log effect is past exp's range, and the report says inf, not OverflowError
    found = detectable(0.364, 2, 0.99995)
    assert found.mde_log > 709.8
    assert found.mde_pct == math.inf
