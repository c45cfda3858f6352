"""The `screen` design: resolution >= III two-level fractions that always contain the baseline,
and the analysis that recovers main effects from them (aliasing stated, never hidden)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sweeps import SweepSpec, build_sweep

from abtest.app.report import build_model
from abtest.config import playbook
from abtest.config.domain import Factor
from abtest.engine import design
from abtest.engine.design import (
    build_arms,
    design_description,
    resolution,
    screen_fraction,
    screen_matrix,
)
from abtest.engine.sweep_plan import arms_for
from abtest.errors import ConfigError, UserError
from abtest.report import build_tables
from abtest.stats import factorial_effects
from abtest.store.db import Store

METRIC = "batch_ready_s"
SIZE = 50


def _factors(k: int) -> list[Factor]:
    return [Factor(f"F{i}", "feature_gate", True, False, "test factor") for i in range(k)]


@pytest.mark.parametrize("k", range(1, design.MAX_SCREEN_FACTORS + 1))
def test_screen_is_orthogonal_resolution_iii_with_the_baseline(k: int) -> None:
    rows = screen_matrix(k)
    # the fewest runs that are a power of two and leave a degree of freedom per main effect
    assert len(rows) == 1 << k.bit_length()
    assert rows[0] == (-1,) * k  # run 0 is the all-off baseline
    assert len(set(rows)) == len(rows)
    x = np.array(rows, dtype=float)
    assert (x.sum(axis=0) == 0).all()  # each factor on in half the arms
    gram = x.T @ x
    assert (gram == len(rows) * np.eye(k)).all()  # main-effect columns orthogonal
    # no defining word shorter than 3: no main effect is aliased with another
    assert all(len(w) >= 3 for w in design.defining_relation(rows))
    frac = screen_fraction(k)
    if frac is not None:
        assert frac.resolution == resolution(rows)
        assert frac.runs == len(rows)


def test_screen_sizes_and_resolutions_as_published() -> None:
    # 2^(4-1) IV with D = ABC and 2^(8-4) IV are the best fractions of their size; the
    # saturated ones are III (2^(3-1), 2^(7-4), 2^(15-11))
    got = {k: (len(screen_matrix(k)), resolution(screen_matrix(k))) for k in (3, 4, 7, 8, 11, 15)}
    assert got == {3: (4, 3), 4: (8, 4), 7: (8, 3), 8: (16, 4), 11: (16, 3), 15: (16, 3)}
    described = design_description("screen", 7)
    assert "2^(7-4) res III" in described and "aliased with two-factor interactions" in described


def test_screen_arms_include_the_baseline_and_are_named_like_every_design() -> None:
    factors = _factors(11)
    arms = build_arms(factors, "screen")
    assert len(arms) == 16 and len({a.on for a in arms}) == 16
    assert arms[0].name == "baseline" and arms[0].on == frozenset()
    assert all(dict(a.settings)[f"featureGates.{f.name}"] is (f.name in a.on)
               for a in arms for f in factors)  # fmt: skip


def test_screen_refuses_too_many_factors() -> None:
    with pytest.raises(UserError, match="at most 15"):
        screen_matrix(16)
    with pytest.raises(UserError, match="at least one"):
        screen_matrix(0)


def gates_for_test() -> tuple[Factor, ...]:
    return tuple(
        Factor(name=n, kind="feature_gate", on=True, off=False, summary=n)
        for n in ("GateA", "GateB")
    )


def test_playbook_takes_every_design_the_cli_takes(tmp_path: Path) -> None:
    # one vocabulary (abtest.config.domain): whole designs, and parts joined by "+"
    path = tmp_path / "p.yaml"
    for name in ("screen", "gates-all", "attribution", "baseline+singles", "singles+leave-one-out"):
        path.write_text(
            f"playbook: s\ncatalog: lab\ndesign: {name}\nsizes: [50]\nrounds: 2\nprofile: lab\n"
        )
        assert playbook.parse_playbook(path).design == name
        assert arms_for(gates_for_test(), name)  # the arm builder takes it too
    path.write_text(
        "playbook: s\ncatalog: lab\ndesign: baseline+halfnormal\nsizes: [50]\nrounds: 2\n"
        "profile: lab\n"
    )
    with pytest.raises(ConfigError, match="'halfnormal'"):
        playbook.parse_playbook(path)


def _screen_rounds(
    factors: list[str], truth: dict[str, float], blocks: int, noise: float, seed: int
) -> tuple[pd.DataFrame, dict[str, frozenset[str]]]:
    rng = np.random.default_rng(seed)
    arms: dict[str, frozenset[str]] = {}
    for row in screen_matrix(len(factors)):
        on = frozenset(f for f, level in zip(factors, row, strict=True) if level > 0)
        arms["+".join(sorted(on)) or "baseline"] = on
    drift = rng.normal(0.0, 0.1, blocks)  # block-to-block drift the model must absorb
    rows = []
    for b, (name, on) in itertools.product(range(blocks), arms.items()):
        # effects in the factorial convention: on vs off changes log y by truth[f]
        log_y = np.log(20.0) + drift[b] + sum(t / 2 * (1 if f in on else -1)
                                              for f, t in truth.items())  # fmt: skip
        rows.append({"arm": name, "size": SIZE, "block": b,
                     METRIC: float(np.exp(log_y + rng.normal(0.0, noise)))})  # fmt: skip
    return pd.DataFrame(rows), arms


def test_screen_analysis_recovers_simulated_main_effects() -> None:
    factors = [f"F{i}" for i in range(11)]
    truth = {"F0": -0.2, "F3": 0.15, "F9": -0.1}  # a saving, a slowdown, a smaller saving
    rounds, arms = _screen_rounds(factors, truth, blocks=3, noise=0.03, seed=13)
    result = factorial_effects(rounds, arms=arms, factors=factors, metric=METRIC, size=SIZE)
    assert "aliased" in result.note and result.interactions == ()
    assert result.blocked and result.n_rounds == 48
    main = {e.term[0]: e for e in result.main}
    for f in factors:  # the effect's standard error is about 0.009 here
        assert main[f].log_effect == pytest.approx(truth.get(f, 0.0), abs=0.04)
    # the real effects are found with the right sign; F0 is about an 18 % saving
    assert main["F0"].log_ci is not None and main["F0"].log_ci[1] < 0
    assert main["F0"].pct_reduction == pytest.approx(18.1, abs=3)
    assert main["F3"].log_ci is not None and main["F3"].log_ci[0] > 0
    assert main["F9"].log_ci is not None and main["F9"].log_ci[1] < 0


def test_screen_main_effect_intervals_are_calibrated() -> None:
    # 2 blocks of a 16-run screen (the lab screen's shape): nominal 95 % must cover 93-97 %
    factors = [f"F{i}" for i in range(10)]
    truth = {"F1": -0.1, "F4": 0.05}
    hits = total = 0
    for seed in range(300):
        rounds, arms = _screen_rounds(factors, truth, blocks=2, noise=0.05, seed=1000 + seed)
        result = factorial_effects(rounds, arms=arms, factors=factors, metric=METRIC, size=SIZE)
        for e in result.main:
            assert e.log_ci is not None
            hits += e.log_ci[0] < truth.get(e.term[0], 0.0) < e.log_ci[1]
            total += 1
    assert 0.93 <= hits / total <= 0.97


def test_a_screen_run_reports_main_effects_and_says_they_are_aliased(store: Store) -> None:
    three = ("kubeAPIQPS", "ContainerCheckpoint", "KubeletPodResourcesGet")
    arms = build_arms([Factor(n, "feature_gate", True, False, "s") for n in three], "screen")
    assert len(arms) == 4  # 2^(3-1): C = -AB
    spec = SweepSpec(
        run_id="screen",
        factors=three,
        arms=tuple((a.name, tuple(n for n in three if n in a.on)) for a in arms),
        design="screen",
        blocks=4,
        sizes=(20,),
        warmup=None,
        rejected=None,
    )
    model = build_model(store, build_sweep(store, spec))
    effects = model.factorial[0]
    assert effects.interactions == () and "aliased" in effects.note
    main = {e.term: e for e in effects.main}
    assert main[("kubeAPIQPS",)].pct_ci is not None and main[("kubeAPIQPS",)].pct_ci[1] < 0
    assert any("Design screen" in line and "aliased" in line for line in model.method)
    table = build_tables(model).factorial[0]
    assert [r[1] for r in table.rows] == ["main"] * 3
    assert any("aliased" in n for n in table.notes)
