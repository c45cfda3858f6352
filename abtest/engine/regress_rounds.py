"""The pre-release regression gate: decide PASS / FAIL / INCONCLUSIVE per (size, metric).

Three sources of rounds, one decision path: a live measurement (the sweep engine with two
arms, more blocks while INCONCLUSIVE), two stored runs, or a rounds CSV. Looks are fixed in
advance — at ``rounds``, ``2 x rounds``, ... up to ``max_rounds`` blocks — so the Bonferroni
spending in ``abtest.stats.regress_decision`` knows ``max_looks`` and the number of (size, metric)
decisions before the first look.
"""

from __future__ import annotations

import math

import pandas as pd

from abtest.errors import UserError
from abtest.stats import Decision, overall_verdict, regression_decision
from abtest.stats.regress_result import RegressResult
from abtest.store.db import Store


def look_schedule(rounds: int, max_rounds: int) -> list[int]:
    """Block counts at which the gate looks: rounds, 2*rounds, ..., capped at max_rounds."""
    if rounds < 2:
        raise UserError("at least 2 blocks are needed for an interval", "--rounds")
    if max_rounds < rounds:
        raise UserError(f"--max-rounds {max_rounds} is below --rounds {rounds}", "--max-rounds")
    looks = [rounds * k for k in range(1, math.ceil(max_rounds / rounds) + 1)]
    looks[-1] = min(looks[-1], max_rounds)
    return sorted(set(looks))


def decide(
    rounds: pd.DataFrame,
    *,
    reference: str,
    candidate: str,
    sizes: list[int],
    metrics: list[str],
    margin_pct: float,
    confidence: float,
    look: int = 1,
    max_looks: int = 1,
    history: pd.DataFrame | None = None,
) -> tuple[Decision, ...]:
    """Every (size, metric) decision of one look; ``history``, the node's earlier rounds if
    the caller has them, informs each metric's resolution (``regression_decision``)."""
    if reference == candidate:
        # One arm against itself is no comparison (the contrast collapses): a usage error.
        raise UserError(
            f"the same arm {reference!r} as reference and candidate",
            "--candidate",
            "give the arm to test with --candidate and the one to test against with --reference",
        )
    arms = set(rounds["arm"].astype(str))
    for name, flag in ((reference, "--reference"), (candidate, "--candidate")):
        if name not in arms:
            raise UserError(f"no rounds for arm {name!r}", flag, f"arms present: {sorted(arms)}")
    # The overall verdict is the worst of these decisions: alpha is spent across all of them.
    family = len(sizes) * len(metrics)
    out = []
    for size in sizes:
        for metric in metrics:
            if metric not in rounds.columns:
                raise UserError(f"no metric column {metric!r}", "--metric")
            out.append(
                regression_decision(
                    rounds,
                    reference=reference,
                    candidate=candidate,
                    size=size,
                    metric=metric,
                    margin_pct=margin_pct,
                    confidence=confidence,
                    look=look,
                    max_looks=max_looks,
                    decisions=family,
                    history=history,
                )
            )
    return tuple(out)


def regress_from_frame(
    rounds: pd.DataFrame,
    *,
    reference: str,
    candidate: str,
    sizes: list[int] | None,
    metrics: list[str],
    margin_pct: float,
    confidence: float,
    source: str,
) -> RegressResult:
    chosen = sizes or sorted({int(s) for s in rounds["size"]})
    decisions = decide(
        rounds,
        reference=reference,
        candidate=candidate,
        sizes=chosen,
        metrics=metrics,
        margin_pct=margin_pct,
        confidence=confidence,
    )
    blocks = int(rounds["block"].nunique()) if "block" in rounds.columns else 0
    return RegressResult(decisions, overall_verdict(decisions), 1, 1, blocks, source)


def analysable_rounds(store: Store, run_id: str) -> pd.DataFrame:
    """Accepted, non-warm-up rounds of a stored run, in the stats layer's frame shape."""
    df = store.rounds_frame(run_id)
    df = df[(df["accepted"] == 1) & (df["warmup"] == 0)].copy()
    if "node_name" in df.columns and df["node_name"].nunique() > 1:
        df["block"] = df["node_name"].astype(str) + "/" + df["block"].astype(str)
    return df


def rounds_of_two_runs(store: Store, reference_run: str, candidate_run: str) -> pd.DataFrame:
    """Two stored runs as one frame with arms `reference` and `candidate`. They must be on the
    same node; blocks of different runs do not pair, so the comparison is unpaired (Welch)."""
    if reference_run == candidate_run:
        raise UserError(
            f"the same run {reference_run} as reference and candidate",
            "--candidate-run",
            "give the run of the candidate and the run of the reference",
        )
    ref_row, cand_row = store.run_row(reference_run), store.run_row(candidate_run)
    if ref_row["node_name"] != cand_row["node_name"]:
        raise UserError(
            f"runs are on different nodes ({ref_row['node_name']} vs {cand_row['node_name']})",
            "--candidate-run",
            "compare runs measured on the same node profile",
        )
    parts = []
    for run_id, arm in ((reference_run, "reference"), (candidate_run, "candidate")):
        df = analysable_rounds(store, run_id)
        if df.empty:
            raise UserError(
                f"run {run_id} has no accepted rounds", "--reference-run/--candidate-run"
            )
        df = df.drop(columns=["block"])
        df["arm"] = arm
        parts.append(df)
    return pd.concat(parts, ignore_index=True)
