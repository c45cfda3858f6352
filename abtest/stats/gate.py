"""The regression gate's result: the decisions, the overall verdict, how many looks."""

from __future__ import annotations

from dataclasses import dataclass

from abtest.stats.regression import Decision

EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}
EXIT_COULD_NOT_MEASURE = 4


@dataclass(frozen=True)
class GateResult:
    decisions: tuple[Decision, ...]
    verdict: str
    looks: int
    max_looks: int
    blocks: int
    source: str  # "live run X", "runs A vs B", "csv PATH"
    run_id: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]
