"""One stored run's frames (``abtest.store.run_frames``) as the report needs them. No statistics.

The unit of analysis is one accepted, non-warm-up round (``included``). Every other round is
kept in :attr:`RunData.rounds` (for the acceptance table and the tidy data) but never reaches
``abtest.stats``. When a run spans several nodes, a block is a (node, block) pair, so that every
node is its own block factor, as the sweep's multi-node mode intends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from abtest.config.json_object import json_object
from abtest.errors import UserError
from abtest.stats import ARM, BLOCK, METRICS, SIZE

if TYPE_CHECKING:
    from abtest.store.run_frames import StoredRun

INCLUDED = "included"


@dataclass(frozen=True)
class ArmInfo:
    """One arm of the run as stored: its factors on, what it set, whether it applied."""

    name: str
    on: tuple[str, ...]
    settings: tuple[tuple[str, str], ...]
    status: str
    failure: str | None


@dataclass(frozen=True)
class RunData:
    run: dict[str, Any]  # the runs row
    env: dict[str, Any]  # runs.env_json, parsed ({} when absent or not an object)
    arms: tuple[ArmInfo, ...]  # display order: baseline, singles, ..., combined
    factors: tuple[str, ...]  # union of the arms' on-factors, first appearance order
    rounds: pd.DataFrame  # every round of the run, plus ``included`` and ``block_label``
    pods: pd.DataFrame  # every pod of the run, plus ``latency_s`` and ``included``
    visits: pd.DataFrame
    deltas: pd.DataFrame  # metric deltas, plus ``included`` and ``per_obs_s``
    # per round, its events summed by (reason, type), plus ``included``
    events: pd.DataFrame = field(default_factory=pd.DataFrame)

    def stats_frame(self, metric: str) -> pd.DataFrame:
        """The rounds frame ``abtest.stats`` takes for ``metric``: included rounds that have it.

        Columns ``arm``, ``size``, ``block`` (only when every round has one) and ``metric``,
        rows in display order of the arms (so stats' tables come out in that order).
        """
        rows = self.rounds[self.rounds[INCLUDED] & self.rounds[metric].notna()]
        frame = pd.DataFrame(
            {
                ARM: rows["arm"].astype(str).to_numpy(),
                SIZE: rows["size"].astype(int).to_numpy(),
                metric: rows[metric].astype(float).to_numpy(),
            }
        )
        labels = rows["block_label"]
        if len(rows) and labels.notna().all():
            frame[BLOCK] = labels.to_numpy()
        rank = {arm.name: i for i, arm in enumerate(self.arms)}
        order = np.argsort([rank.get(a, len(rank)) for a in frame[ARM]], kind="stable")
        return frame.iloc[order].reset_index(drop=True)

    def metrics(self) -> tuple[str, ...]:
        """The summary metrics that at least one included round has."""
        included = self.rounds[self.rounds[INCLUDED]]
        return tuple(m for m in METRICS if included[m].notna().any())

    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted(int(s) for s in pd.unique(self.rounds["size"])))

    def arm(self, name: str) -> ArmInfo | None:
        return next((a for a in self.arms if a.name == name), None)

    def stored_plan(self) -> dict[str, Any]:
        """The run's plan (``plan_json``); {} when absent, not JSON or not an object: such a
        plan tells nothing, and the rest of the report stands."""
        return json_object(self.run.get("plan_json")) or {}


def run_data(stored: StoredRun) -> RunData:
    """The run's frames with what every table reads: the analysed flag, block labels, each
    pod's latency and each metric delta per observation."""
    run = stored.run
    env = _json_object(run.get("env_json"))
    rounds = stored.rounds
    stored_arms = _arms(stored.arms, rounds)
    factors = _factors(stored_arms)
    arms = _display_order(stored_arms, factors)

    rounds = rounds.copy()
    rounds[INCLUDED] = _analysed(rounds)
    rounds["block_label"] = _block_labels(rounds)

    pods = stored.pods
    pods["latency_s"] = pods["ready_s"] - pods["sent_s"]
    pods[INCLUDED] = _analysed(pods)

    deltas = stored.deltas
    deltas[INCLUDED] = _analysed(deltas)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_obs = deltas["delta_sum"].astype(float) / deltas["delta_count"].astype(float)
    deltas["per_obs_s"] = per_obs.where(deltas["delta_count"].astype(float) > 0)

    events = stored.events
    events[INCLUDED] = _analysed(events)

    return RunData(
        run=run,
        env=env,
        arms=arms,
        factors=factors,
        rounds=rounds,
        pods=pods,
        visits=stored.visits,
        deltas=deltas,
        events=events,
    )


def _analysed(frame: pd.DataFrame) -> pd.Series:
    """Rows of accepted, non-warm-up rounds (the frame carries its round's two flags)."""
    return (frame["accepted"] == 1) & (frame["warmup"] == 0)


def _json_object(text: object) -> dict[str, Any]:
    if not isinstance(text, str) or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"env_json": text}
    return value if isinstance(value, dict) else {"env_json": value}


def _factor_names(text: object, arm: str) -> list[str]:
    """An arm's stored factors (a JSON array of names); one line for junk (a hand edit, an
    import from before imports were checked), never a traceback."""
    try:
        value = json.loads(text) if isinstance(text, str) and text.strip() else []
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, list):
        raise UserError(
            f"arm {arm!r}: its stored factors (on_json) are not a JSON array",
            "the results database",
            "the run's rows were changed by hand or by a bad import",
        )
    return [str(f) for f in value]


def _arms(arms_raw: pd.DataFrame, rounds: pd.DataFrame) -> list[ArmInfo]:
    arms: list[ArmInfo] = []
    for row in arms_raw.to_dict(orient="records"):
        on = _factor_names(row["on_json"], str(row["name"]))
        settings = _json_object(row["settings_json"])
        failure = row["failure"]
        arms.append(
            ArmInfo(
                name=str(row["name"]),
                on=tuple(str(f) for f in on),
                settings=tuple((str(k), json.dumps(v)) for k, v in settings.items()),
                status=str(row["status"]),
                failure=failure if isinstance(failure, str) and failure else None,
            )
        )
    # Rounds of an arm the arms table does not list (e.g. a plain `abtest batch` run).
    known = {a.name for a in arms}
    for name in pd.unique(rounds["arm"]):
        if str(name) not in known:
            arms.append(ArmInfo(str(name), (), (), "ok", None))
            known.add(str(name))
    return arms


def _factors(arms: list[ArmInfo]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for arm in sorted(arms, key=lambda a: len(a.on) != 1):  # singles first: catalog order
        for factor in arm.on:
            seen.setdefault(factor, None)
    return tuple(seen)


def _display_order(arms: list[ArmInfo], factors: tuple[str, ...]) -> tuple[ArmInfo, ...]:
    """baseline, singles (factor order), other subsets by size, leave-one-outs, combined."""
    k = len(factors)
    position = {f: i for i, f in enumerate(factors)}

    def key(indexed: tuple[int, ArmInfo]) -> tuple[int, int, int]:
        index, arm = indexed
        n_on = len(arm.on)
        first = min((position[f] for f in arm.on), default=-1)
        if n_on == 1:
            return (1, first, index)
        if k >= 2 and n_on == k:
            return (k + 1, 0, index)
        return (n_on if n_on else 0, 0, index)

    return tuple(arm for _, arm in sorted(enumerate(arms), key=key))


def _block_labels(rounds: pd.DataFrame) -> pd.Series:
    """The pairing unit per round: the block, or node/block when the run has several nodes."""
    blocks = rounds["block"]
    if len(pd.unique(rounds["node_name"])) <= 1:
        return blocks.map(lambda b: None if pd.isna(b) else str(int(b)))
    return pd.Series(
        [
            None if pd.isna(b) else f"{node}/{int(b)}"
            for node, b in zip(rounds["node_name"], blocks, strict=True)
        ],
        index=rounds.index,
        dtype=object,
    )
