"""`abtest history`: one node's figure across runs, its change points (Apache Otava), and what
changed between the runs either side of each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from abtest.config.numbers import check_probability
from abtest.errors import AbtestError, UserError
from abtest.node.kubelet_config import changed_fields
from abtest.stats.changepoints import (
    CONFIRM_RUNS,
    MAX_PVALUE,
    MIN_RUNS,
    ChangePoint,
    RunFigure,
    change_points,
    run_figure,
)
from abtest.store.db import DbTarget, Store
from abtest.store.node_history import METRICS, base_config, node_arms, node_rounds, pool_facts


@dataclass(frozen=True)
class HistoryRequest:
    node: str | tuple[str, ...]  # one node, or a pool (each run's figure over its nodes)
    arm: str | None = None
    size: int | None = None
    metric: str = "batch_ready_s"
    # alarm on a slower change point confirmed within the last K runs
    fail_on_new: int | None = None
    # ... and on an unconfirmed one (its new level only the last run or two) in the last K runs
    alarm_unconfirmed: bool = False
    max_pvalue: float = MAX_PVALUE
    confidence: float = 0.95
    db: DbTarget = None


@dataclass(frozen=True)
class History:
    node: str
    arm: str
    size: int
    metric: str
    max_pvalue: float
    figures: list[RunFigure]
    change_points: list[ChangePoint]
    # per change point: fact -> [before, after], for the facts that differ
    changed: list[dict[str, list[Any]]] = field(default_factory=list)
    alarms: list[ChangePoint] = field(default_factory=list)
    fail_on_new: int | None = None
    alarm_unconfirmed: bool = False


def _nodes(req: HistoryRequest) -> tuple[str, ...]:
    return (req.node,) if isinstance(req.node, str) else tuple(dict.fromkeys(req.node))


def _choose(store: Store, req: HistoryRequest, name: str) -> tuple[str, int]:
    measured = node_arms(store, _nodes(req))
    if not measured:
        raise UserError(f"no accepted rounds of node {name!r}", store.name, "see `abtest runs`")
    arms = [a for a, _ in measured]
    arm = req.arm or ("baseline" if "baseline" in arms else measured[0][0])
    sizes = [s for a, s in measured if a == arm]
    if not sizes:
        raise UserError(f"node {name!r} has no rounds of arm {arm!r}", None,
                        f"arms measured there: {', '.join(sorted(set(arms)))}")  # fmt: skip
    size = req.size if req.size is not None else sizes[0]
    if size not in sizes:
        raise UserError(f"arm {arm!r} was never measured at {size} pods on {name!r}", None,
                        f"sizes: {', '.join(map(str, sorted(sizes)))}")  # fmt: skip
    return arm, size


def _config_fields(
    store: Store, run_before: str, run_after: str, node: str, *, pooled: bool
) -> dict[str, list[Any]]:
    """The node's kubelet settings that differ between the configs the two runs found (a
    hash says only that the file changed; a node team needs to know which setting)."""
    old, new = base_config(store, run_before, node), base_config(store, run_after, node)
    if old is None or new is None or old == new:
        return {}
    try:
        fields = changed_fields(old.decode("utf-8", "replace"), new.decode("utf-8", "replace"))
    except AbtestError:  # a file that no longer parses: the hash still says it changed
        return {}
    prefix = f"{node} config." if pooled else "config."
    return {prefix + path: values for path, values in fields.items()}


def history(req: HistoryRequest) -> History:
    check_probability(req.max_pvalue, "--max-pvalue", "a significance level, e.g. 0.001")
    if req.metric not in METRICS:
        raise UserError(f"unknown metric {req.metric!r}", "--metric", f"use {', '.join(METRICS)}")
    if req.fail_on_new is not None and req.fail_on_new < 1:
        raise UserError("--fail-on-new must be at least 1", "--fail-on-new")
    if req.alarm_unconfirmed and req.fail_on_new is None:
        raise UserError(
            "--alarm-unconfirmed needs --fail-on-new K",
            "--alarm-unconfirmed",
            "add --fail-on-new 1",
        )
    nodes = _nodes(req)
    if not nodes:
        raise UserError("--node is required", "--node")
    name = "+".join(nodes)
    with Store(req.db) as store, store.snapshot():
        arm, size = _choose(store, req, name)
        rounds = node_rounds(store, nodes, arm, size, req.metric)
        figures = [
            run_figure(
                str(run_id),
                str(group["created_at"].iloc[0]),
                [float(v) for v in group["value"]],
                req.confidence,
            )
            for run_id, group in rounds.groupby("run_id", sort=False)
        ]
        if len(figures) < MIN_RUNS:
            raise UserError(
                f"node {name!r} has {len(figures)} run(s) of arm {arm!r} at {size} pods; "
                f"history needs at least {MIN_RUNS} (change points need runs on both sides)",
            )
        found = change_points(figures, req.max_pvalue, req.confidence)
        changed = []
        for cp in found:
            before = pool_facts(store, figures[cp.index - 1].run_id, nodes, arm)
            after = pool_facts(store, figures[cp.index].run_id, nodes, arm)
            runs = figures[cp.index - 1].run_id, figures[cp.index].run_id
            differ = {
                k: [before.get(k), after.get(k)] for k in after if before.get(k) != after.get(k)
            }
            for node in nodes:
                differ |= _config_fields(store, *runs, node, pooled=len(nodes) > 1)
            changed.append(differ)
    alarms = _alarms(req, figures, found)
    return History(name, arm, size, req.metric, req.max_pvalue, figures, found, changed,
                   alarms, req.fail_on_new, req.alarm_unconfirmed)  # fmt: skip


#: the reports the pager compares with: those of K, K + 1, ... K + RECALL - 1 runs ago. Otava
#: may drop a step for a night or two and find it again; against the report of K runs ago
#: alone 13 % of 10 % steps paged twice, against these 5 none of 200 (issue 46)
RECALL = 5


def earlier_reports(
    figures: Sequence[RunFigure], last: int, max_pvalue: float, confidence: float
) -> list[ChangePoint]:
    """The change points the reports of ``last`` to ``last + RECALL - 1`` runs ago showed (a
    series then too short for change points showed none)."""
    out: list[ChangePoint] = []
    for back in range(last, last + RECALL):
        out += change_points(figures[: max(len(figures) - back, 0)], max_pvalue, confidence)
    return out


def _alarms(
    req: HistoryRequest, figures: list[RunFigure], found: list[ChangePoint]
) -> list[ChangePoint]:
    """``--fail-on-new K``'s alarms, against what the reports before showed."""
    if req.fail_on_new is None:
        return []
    earlier = earlier_reports(figures, req.fail_on_new, req.max_pvalue, req.confidence)
    return new_alarms(found, len(figures), req.fail_on_new, req.alarm_unconfirmed, earlier=earlier)


def new_alarms(
    found: list[ChangePoint],
    runs: int,
    last: int | None,
    unconfirmed: bool = False,
    *,
    earlier: Sequence[ChangePoint],
) -> list[ChangePoint]:
    """Slower confirmed change points the reports of ``last`` runs ago did not show confirmed
    (``earlier``: their change points, ``earlier_reports``), and with
    ``unconfirmed`` slower ones whose new level began in the last ``last`` runs and is not
    confirmed yet.

    Why against that report, not "confirmed on the step's third night": Otava often finds a
    step only nights later, once enough runs sit on either side of it; a rule tied to the
    third night then never paged (a 10 % step: paged 42 % of series, the report showed it in
    79 % by night 9; issue 46). A change point an earlier report showed confirmed within
    ``CONFIRM_RUNS`` runs of it (Otava may place it a run apart from night to night; two
    confirmed ones are at least 1 + CONFIRM_RUNS runs apart) is the same change: no page."""
    if last is None:
        return []
    shown = [c.index for c in earlier if c.confirmed and c.slower]

    def new(cp: ChangePoint) -> bool:
        if cp.confirmed:
            # a step whose own interval reaches "no slower" is no news to page on: with any
            # night able to page, such steps on flat series at --max-pvalue 0.01 took the
            # false pages from 2.0 to 2.5 % a night (20 runs; the third-night rule: 1.5 %)
            demonstrated = cp.step_low is None or cp.step_low > 0
            return demonstrated and all(abs(cp.index - i) > CONFIRM_RUNS for i in shown)
        return unconfirmed and cp.index >= runs - last

    return [cp for cp in found if cp.slower and new(cp)]
