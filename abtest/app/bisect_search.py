"""The search of `abtest bisect`: the endpoint confirmation, then the steps, each measured,
decided and recorded in its run's plan entry (so a stopped search resumes where it was)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from abtest.analysis.bisect import ENTRY, Span, StepRecord, conclude
from abtest.app.bisect_builds import Builder
from abtest.app.bisect_state import BisectParameters, Pending, StoredBisection, settings_json
from abtest.config.playbook import NodeProfile, Playbook
from abtest.engine.bisect_steps import (
    BisectSetup,
    Measured,
    confirm_at,
    measure,
    measure_plan,
    step_at,
)
from abtest.engine.sweep_nodes import NodeKit
from abtest.stats.bisect import BAD, GOOD, OUTCOMES, middle
from abtest.store.db import Store

if TYPE_CHECKING:
    import pandas as pd

T = TypeVar("T")  # what a measurement's decide_at decides


class Search:
    """One bisection's search over ``settings.names`` (0 good, last bad)."""

    def __init__(
        self,
        store: Store,
        settings: BisectParameters,
        playbook: Playbook,
        nodes: Sequence[NodeProfile],
        builder: Builder,
        say: Callable[[str], None],
        kit: NodeKit | None,
        accept_new_host_key: bool = False,
    ) -> None:
        self.store, self.settings, self.builder, self.say, self.kit = (
            store,
            settings,
            builder,
            say,
            kit,
        )
        self.root: str | None = None
        self.pending: Pending | None = None
        self.setup = BisectSetup(
            playbook,
            tuple(nodes),
            settings.profiles,
            settings.size,
            settings.metric,
            settings.margin_pct,
            settings.confidence,
            settings.first_look,
            settings.max_blocks,
            settings.seed,
            accept_new_host_key,
        )

    def run(self, stored: StoredBisection | None) -> None:
        """Replay a resumed search's decided records (checked whole when read), then measure
        until it ends."""
        self.pending = stored.pending if stored else None
        self.root = stored.root if stored else None
        names = self.settings.names
        records = list(stored.records) if stored else []
        if not records:
            records = [self._confirm()]
        elif stored:
            self.say(f"resuming bisection {stored.root}: {len(records)} measurement(s) decided")
        if records[0].outcome != "FAIL":
            self.say(conclude(names, records, True).message)
            return
        low, high = 0, len(names) - 1
        for rec in records[1:]:
            mid = names.index(rec.builds[1])
            if rec.outcome not in ("GOOD", "BAD"):
                return
            low, high = (mid, high) if rec.outcome == "GOOD" else (low, mid)
        index = len(records)
        while high - low >= 2:
            mid = middle(low, high)
            rec = self._step(index, names[low], names[mid], names[high])
            if rec.outcome == OUTCOMES[GOOD]:
                low = mid
            elif rec.outcome == OUTCOMES[BAD]:
                high = mid
            else:
                return
            index += 1

    def _started(self, index: int, builds: Sequence[str]) -> Callable[[str], None]:
        def tag(run_id: str) -> None:
            if index == 0:
                self.root = run_id
            entry: dict[str, Any] = {"root": self.root, "index": index, "builds": list(builds)}
            if index == 0:
                entry["settings"] = settings_json(self.settings)
            self.store.runs.set_plan_entry(run_id, ENTRY, entry)
            self.say(f"run {run_id}" + (" (the bisection's id)" if index == 0 else ""))

        return tag

    def _looked(self, run_id: str, seconds: float) -> None:
        """Keep the node time so far in the run's entry: a resumed run goes on counting."""
        entry = self.store.runs.plan(run_id).get(ENTRY, {})
        self.store.runs.set_plan_entry(run_id, ENTRY, {**entry, "wall_s": seconds})

    def _resumed(self, index: int) -> tuple[str | None, float]:
        """The undecided run of measurement ``index`` and the node time it had spent."""
        pending = self.pending
        if pending is None or pending.index != index:
            return None, 0.0
        return pending.run_id, pending.wall_s

    def _record(self, rec: StepRecord) -> StepRecord:
        entry = self.store.runs.plan(rec.run_id).get(ENTRY, {})
        self.store.runs.set_plan_entry(rec.run_id, ENTRY, {**entry, "record": rec.to_json()})
        return rec

    def _measure(
        self,
        index: int,
        arms: Sequence[tuple[str, str]],
        decide_at: Callable[[pd.DataFrame, int, int], T | None],
    ) -> tuple[T, Measured]:
        """Measurement ``index`` (0: the ends, then each step): its builds placed, its arms
        (``(arm, build)``) run look by look until ``decide_at`` decides, resuming its undecided
        run if the search was stopped in it. Its schedule is seeded with seed + index, so no
        two measurements share a seed."""
        builds = [build for _, build in arms]
        self.builder.place([self.settings.build(n) for n in builds], self.say)
        built = [(arm, self.settings.build(name)) for arm, name in arms]
        plan = measure_plan(self.setup, built, self.settings.seed + index)
        run_id, spent = self._resumed(index)
        return measure(
            plan,
            self.setup,
            self.store,
            decide_at,
            say=self.say,
            started=self._started(index, builds),
            run_id=run_id,
            kit=self.kit,
            spent=spent,
            looked=self._looked,
        )

    def _confirm(self) -> StepRecord:
        good, bad = self.settings.names[0], self.settings.names[-1]
        self.say(f"confirming the ends: {bad} (bad) against {good} (good)")
        found, m = self._measure(0, [("good", good), ("bad", bad)], confirm_at(self.setup))
        ci = found.slowdown_ci or (math.nan, math.nan)
        span = Span.of(found.slowdown_pct, ci[0], ci[1])
        self.say(f"ends: {found.verdict}: {bad} vs {good} {span.text()} ({m.blocks} blocks)")
        rec = StepRecord(
            0, m.run_id, (good, bad), found.verdict, (("bad vs good", span),), m.blocks,
            m.looks, m.wall_s, found.look_confidence,
        )  # fmt: skip
        return self._record(rec)

    def _step(self, index: int, low: str, mid: str, high: str) -> StepRecord:
        self.say(f"step {index}: {mid} between {low} (good) and {high} (bad)")
        arms = [("low", low), ("mid", mid), ("high", high)]
        found, m = self._measure(index, arms, step_at(self.setup))
        spans = (
            ("mid vs low", Span.of(*(float(v) for v in found.low_mid_pct))),
            ("high vs mid", Span.of(*(float(v) for v in found.mid_high_pct))),
        )
        outcome = OUTCOMES[int(found.outcome)]
        self.say(
            f"step {index}: {mid} is {outcome} ({spans[0][0]} {spans[0][1].text()}, "
            f"{spans[1][0]} {spans[1][1].text()}; {m.blocks} blocks)"
        )
        rec = StepRecord(
            index, m.run_id, (low, mid, high), outcome, spans, m.blocks, m.looks, m.wall_s,
            found.level,
        )  # fmt: skip
        return self._record(rec)
