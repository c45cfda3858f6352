"""The report's word on when each round started against the kubelet's 1 s relist (issue 46).

A small batch is ready on the relist after its work. Rounds that start at a uniform phase of
that tick (the generator's ``start_dither_s``, abtest.batch.start_phase) measure the batch's
time on a node with random arrivals, and the intervals are calibrated for them
(tests/unit/stats/test_tick_calibration.py). Rounds that started without the random wait may
share one phase: then a change in work shows as nothing or as a whole tick, and no analysis of
the batch times can say how much work changed. The Method says which the run had.
"""

from __future__ import annotations

from abtest.analysis.run_data import RunData

_SHARED = (
    "rounds may share one phase of the kubelet's 1 s relist, so a change in work can show as "
    "nothing or as a whole tick at small sizes"
)


def start_phase_method(data: RunData) -> tuple[str, ...]:
    """One Method line for a run of rounds made by abtest (none for other runs)."""
    plan = data.stored_plan()
    generator = plan.get("generator")
    if not isinstance(generator, dict):
        return ()  # not a sweep's plan (imported rounds, a single batch): nothing known
    width = generator.get("start_dither_s")
    if width is None:
        return (f"Start phase: each round's first create followed the watch at once (a run "
                f"from before the random start); {_SHARED}.",)  # fmt: skip
    if not isinstance(width, int | float) or width <= 0:
        return (f"Start phase: the random start was off (start_dither_s: 0); {_SHARED}.",)
    return (
        f"Start phase: each round's first create waited a uniform 0-{width:g} s after the watch "
        "opened, so batches started at a uniform phase of the kubelet's 1 s relist.",
    )
