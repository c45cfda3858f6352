"""The live gate (``decide`` + ``overall_verdict`` on frames) against the simulated one
(``regress_codes``): the calibration's rates are the gate's only if the two agree look by look."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from abtest.config.playbook import Playbook
from abtest.engine.regress_rounds import decide, look_schedule
from abtest.stats import overall_verdict
from abtest.stats.intervals import FloatArray
from abtest.stats.regress_decision import Decision
from abtest.stats.regress_sim import regress_codes

VERDICTS = {0: "PASS", 1: "INCONCLUSIVE", 2: "FAIL"}


def live_looks(cells: FloatArray, playbook: Playbook) -> Iterator[tuple[Decision, ...]]:
    """Each simulated gate of ``cells`` (gates, metrics, blocks, 2) run live at each of the
    playbook's looks; asserts each look's verdict is the simulation's, yields its decisions."""
    looks = look_schedule(playbook.rounds, playbook.max_rounds)
    metrics = list(playbook.metrics)
    level = 1 - (1 - playbook.confidence) / len(looks)
    for gate in range(cells.shape[0]):
        frame = pd.DataFrame(
            [{"arm": arm, "size": 10, "block": b,
              **{m: cells[gate, i, b, a] for i, m in enumerate(metrics)}}
             for b in range(cells.shape[2]) for a, arm in enumerate(("ref", "cand"))]
        )  # fmt: skip
        for look, blocks in enumerate(looks, start=1):
            decisions = decide(
                frame[frame["block"] < blocks], reference="ref", candidate="cand", sizes=[10],
                metrics=metrics, margin_pct=playbook.margin_pct, confidence=playbook.confidence,
                look=look, max_looks=len(looks),
            )  # fmt: skip
            # one look of a k-look family at 1 - alpha / k is this look of the planned k
            expected = regress_codes(cells[gate : gate + 1], [blocks], level, playbook.margin_pct)
            assert overall_verdict(decisions) == VERDICTS[int(expected[0])]
            yield decisions
