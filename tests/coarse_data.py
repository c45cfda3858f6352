"""Simulated round times the way coarse lab data come (issue 37), vectorized for calibration.

Each round's true time is log-normal around ``base`` seconds: a block effect (drift, shared by
the arms of one block) and the round's own noise; the candidate (arm 1) is ``truth_pct`` slower.
Then the time is observed as one of:

- ``"exact"``: as is;
- ``"whole"``: rounded to whole seconds (kube-burner's latencies);
- ``"relist"``: the work plus a wait to the next 1 s tick, the batch starting at a random phase
  of the tick (a batch dominated by the 1 s relist: continuous, but not normal);
- ``"tick"``: the same with the batch starting on a tick (whole seconds, rounded up);
- ``"tickish"``: that with 20 ms of jitter (whole-second-ish: on no grid, bimodal).

Shape (simulations, decisions, blocks, 2): decisions are metrics correlated by ``rho``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from abtest.stats.intervals import FloatArray

MODES = ("exact", "whole", "relist", "tick", "tickish")


def rounds(
    rng: np.random.Generator,
    *,
    sims: int,
    blocks: int,
    truth_pct: float | list[float],
    decisions: int = 1,
    base: float = 5.5,
    noise: float = 0.08,
    drift: float = 0.05,
    rho: float = 0.7,
    mode: str = "whole",
) -> FloatArray:
    work = true_work(rng, sims=sims, blocks=blocks, truth_pct=truth_pct, decisions=decisions,
                     base=base, noise=noise, drift=drift, rho=rho)  # fmt: skip
    return observe(rng, work, mode)


def true_work(
    rng: np.random.Generator,
    *,
    sims: int,
    blocks: int,
    truth_pct: float | list[float],
    decisions: int,
    base: float,
    noise: float,
    drift: float,
    rho: float,
) -> FloatArray:
    """The rounds' true times before they are observed (``rounds``' and ``tick_data.ticked``'s
    model): a block effect, each decision's noise correlated by ``rho``, the candidate slower."""
    truths = np.broadcast_to(np.asarray(truth_pct, dtype=np.float64), (decisions,))
    block = rng.normal(0.0, drift, (sims, 1, blocks, 1))
    common = rng.normal(size=(sims, 1, blocks, 2))
    own = rng.normal(size=(sims, decisions, blocks, 2))
    logs = np.log(base) + block + noise * (np.sqrt(rho) * common + np.sqrt(1 - rho) * own)
    logs[..., 1] += np.log1p(truths / 100.0)[None, :, None]
    return np.asarray(np.exp(logs), dtype=np.float64)


def history(
    rng: np.random.Generator,
    *,
    runs: int = 3,
    blocks: int = 5,
    arms: int = 4,
    arm_sd: float = 0.10,
    base: float = 5.5,
    noise: float = 0.08,
    drift: float = 0.05,
    mode: str = "whole",
) -> pd.DataFrame:
    """A node's earlier runs of such rounds, in the frame ``noise_from_history`` and
    ``round_model`` take: ``runs`` runs of ``blocks`` blocks of ``arms`` arms at 10 pods, the
    arm "baseline" at ``base`` and each other with its own real effect (log SD ``arm_sd``, the
    same in every run: the same gates), metric ``m``."""
    shape = (runs, blocks, arms)
    effects = rng.normal(0.0, arm_sd, (1, 1, arms))
    effects[..., 0] = 0.0  # arm 0, "baseline", is the rounds of ``rounds``' reference
    logs = (
        np.log(base)
        + effects
        + rng.normal(0.0, drift, (runs, blocks, 1))
        + rng.normal(0.0, noise, shape)
    )
    values = observe(rng, np.exp(logs), mode)
    r, b, a = np.meshgrid(range(runs), range(blocks), range(arms), indexing="ij")
    names = np.array(["baseline", *(f"arm{i}" for i in range(1, arms))])
    return pd.DataFrame(
        {"group": r.ravel(), "block": b.ravel(), "arm": names[a.ravel()], "size": 10,
         "m": values.ravel()}
    )  # fmt: skip


def correlated_history(
    rng: np.random.Generator,
    *,
    metrics: tuple[str, ...] = ("m", "p"),
    rho: float = 0.7,
    runs: int = 3,
    blocks: int = 5,
    arms: int = 4,
    arm_sd: float = 0.10,
    base: float = 5.5,
    noise: float = 0.035,
    drift: float = 0.05,
    mode: str = "exact",
) -> pd.DataFrame:
    """``history`` with several metrics of the same rounds, their round noise correlated by
    ``rho`` as ``rounds``' decisions are (batch_ready_s and p95_s of one batch)."""
    shape = (runs, blocks, arms)
    effects = rng.normal(0.0, arm_sd, (1, 1, arms))
    effects[..., 0] = 0.0
    level = np.log(base) + effects + rng.normal(0.0, drift, (runs, blocks, 1))
    common = rng.normal(size=shape)
    r, b, a = np.meshgrid(range(runs), range(blocks), range(arms), indexing="ij")
    names = np.array(["baseline", *(f"arm{i}" for i in range(1, arms))])
    frame = pd.DataFrame(
        {"group": r.ravel(), "block": b.ravel(), "arm": names[a.ravel()], "size": 10}
    )
    for metric in metrics:
        own = rng.normal(size=shape)
        work = np.exp(level + noise * (np.sqrt(rho) * common + np.sqrt(1 - rho) * own))
        frame[metric] = observe(rng, work, mode).ravel()
    return frame


def observe(rng: np.random.Generator, work: FloatArray, mode: str) -> FloatArray:
    """``work`` as observed in ``mode`` (see the module's docstring)."""
    if mode == "exact":
        return work
    if mode == "whole":
        return np.asarray(np.maximum(np.round(work), 1.0), dtype=np.float64)
    if mode == "tick":
        return np.asarray(np.ceil(work), dtype=np.float64)
    if mode == "tickish":
        return np.asarray(np.ceil(work) + rng.normal(0.0, 0.02, work.shape), dtype=np.float64)
    if mode == "relist":
        phase = rng.uniform(size=work.shape)
        return np.asarray(np.ceil(work + phase) - phase, dtype=np.float64)
    raise ValueError(mode)
