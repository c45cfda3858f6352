"""The regression gate's result: the decisions, the overall verdict, how many looks."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from abtest.stats.frame import finite
from abtest.stats.regress_decision import Decision

EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}
EXIT_COULD_NOT_MEASURE = 4


@dataclass(frozen=True)
class RegressResult:
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the verdict, its exit code, where the rounds came from, the looks and
        every decision with the numbers behind it."""
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "source": self.source,
            "run_id": self.run_id,
            "looks": self.looks,
            "max_looks": self.max_looks,
            "blocks": self.blocks,
            "decisions": [
                {f.name: finite(getattr(d, f.name)) for f in fields(d)} for d in self.decisions
            ],
        }
