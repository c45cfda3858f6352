"""One round (summary, every pod's timestamps, events, metric deltas) as the store's rows.

The store writes them in one transaction per round, committed before returning: a finished
round is on disk before the next one starts, and a crash never leaves half a round.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from abtest.batch.round_gaps import AFTER, BEFORE, GapPart, phase_total
from abtest.batch.round_records import RoundResult
from abtest.store.db import Store

POD_COLUMNS = (
    "name", "sent_s", "response_s", "scheduled_s", "ready_to_start_s", "initialized_s",
    "containers_ready_s", "ready_s", "http_status", "attempts", "restarts", "ready_regressed",
    "server_created", "server_scheduled", "server_ready", "container_started_s",
)  # fmt: skip


def gap_parts(result: RoundResult, previous: RoundResult | None = None) -> list[GapPart]:
    """The round's gap parts, led (when the sweep gives the round before it in the same
    visit) by the sweep's own share: the previous round's return -> this round's entry
    (storing that round, progress output)."""
    parts = list(result.gap_parts)
    if (
        previous is not None
        and previous.returned_mono is not None
        and result.entered_mono is not None
    ):
        sweep_s = max(0.0, result.entered_mono - previous.returned_mono)
        parts.insert(0, GapPart(BEFORE, "sweep", sweep_s))
    return parts


def gap_rows(parts: Sequence[GapPart]) -> list[tuple[Any, ...]]:
    seq: dict[str, int] = {}
    rows = []
    for p in parts:
        seq[p.phase] = seq.get(p.phase, 0) + 1
        rows.append((p.phase, seq[p.phase], p.part, p.seconds, int(p.summed)))
    return rows


def round_row(
    run_id: str,
    result: RoundResult,
    *,
    arm: str,
    ordinal: int,
    block: int | None,
    visit_id: int | None,
    warmup: bool,
    parts: Sequence[GapPart] = (),
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "visit_id": visit_id,
        "node_name": result.node_name,
        "block": block,
        "arm": arm,
        "size": result.size,
        "ordinal": ordinal,
        "warmup": int(warmup),
        "started_wall": result.started_wall,
        "accepted": int(result.accepted),
        "reason": result.reason,
        **result.measures(),
        "gap_before_s": phase_total(parts, BEFORE),
        "gap_after_s": phase_total(parts, AFTER),
        "phases_json": json.dumps(result.summary.phases, sort_keys=True),
    }


def record_round(
    store: Store,
    run_id: str,
    result: RoundResult,
    *,
    arm: str = "as-is",
    ordinal: int = 1,
    block: int | None = None,
    visit_id: int | None = None,
    warmup: bool = False,
    previous: RoundResult | None = None,
) -> int:
    """Store ``result`` under ``run_id``; returns the new rounds.id. ``previous``: the round
    before it in the same visit, for the sweep's share of the gap between them."""
    parts = gap_parts(result, previous)
    row = round_row(
        run_id, result, arm=arm, ordinal=ordinal, block=block, visit_id=visit_id,
        warmup=warmup, parts=parts,
    )  # fmt: skip
    return store.rounds.add(
        row,
        [
            ("round_gaps", ("phase", "seq", "part", "seconds", "summed"), gap_rows(parts)),
            ("pods", POD_COLUMNS, [tuple(getattr(p, c) for c in POD_COLUMNS) for p in result.pods]),
            (
                "events",
                ("pod", "reason", "message", "count", "type"),
                [(e.pod, e.reason, e.message, e.count, e.type) for e in result.events],
            ),
            (
                "metric_deltas",
                ("metric", "labels", "delta_sum", "delta_count"),
                [(m.metric, m.labels, m.delta_sum, m.delta_count) for m in result.metric_deltas],
            ),
        ],
    )
