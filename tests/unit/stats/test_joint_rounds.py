"""``joint_draws``: every decision of a simulated round comes from the same history round
(issue 46), matched by run, block and arm even where the decisions' histories differ in order
or in which rounds they hold."""

from __future__ import annotations

import numpy as np
from coarse_data import correlated_history

from abtest.stats.joint_rounds import joint_draws
from abtest.stats.round_model import RoundModel, draws, round_model


def _models(frame_b_drops: int = 0) -> tuple[RoundModel, RoundModel]:
    frame = correlated_history(np.random.default_rng(1))
    a = round_model(frame, metric="m", size=10)
    # the second metric's rounds in another order, and some of them missing
    other = frame.sample(frac=1.0, random_state=2).iloc[frame_b_drops:]
    b = round_model(other, metric="p", size=10)
    assert a is not None and b is not None
    return a, b


def test_each_simulated_round_is_one_history_round_for_every_decision() -> None:
    a, b = _models(frame_b_drops=4)
    da, db = joint_draws([a, b], sims=50, blocks=7, seed=3)
    keys_a, keys_b = np.array(a.block_keys), np.array(b.block_keys)
    assert (keys_a[da.block] == keys_b[db.block]).all()
    cells_a, cells_b = np.array(a.cell_keys), np.array(b.cell_keys)
    assert (cells_a[da.resid] == cells_b[db.resid]).all()
    # a round missing from one decision's history is drawn for neither
    assert set(cells_a[da.resid].ravel()) <= set(b.cell_keys)


def test_residuals_and_normals_keep_the_metrics_correlation() -> None:
    a, b = _models()
    da, db = joint_draws([a, b], sims=400, blocks=20, seed=4)
    ra, rb = a.residuals[da.resid].ravel(), b.residuals[db.resid].ravel()
    assert np.corrcoef(ra, rb)[0, 1] > 0.5  # rho 0.7 in the rounds
    assert np.corrcoef(da.normal.ravel(), db.normal.ravel())[0, 1] > 0.5


def test_histories_that_share_no_rounds_are_drawn_independently() -> None:
    a, b = _models()
    apart = RoundModel(**{**b.__dict__, "block_keys": (), "cell_keys": ()})
    da, db = joint_draws([a, apart], sims=10, blocks=5, seed=8)
    assert (db.block == draws(apart, 10, 5, 9).block).all()
    assert (da.block == draws(a, 10, 5, 8).block).all()
