"""The reference article's views of a run: the runtime x settings two-way table and "where the
time went". Finds what they need in the stored run and calls ``abtest.stats``; no statistics.

Which factor is the pod-spec one (the runtime) is read from what the run stored: an arm's pod
part (``pod.runtimeClassName`` / ``pod.annotations.<key>``, in the arm's settings or the plan's
``arm_pods``), so the factor whose on/off flips that value is the pod-spec factor, and the two
values it flips between are the table's rows, as they ran. A run that stored no pod part
(older runs) falls back to the catalog it names, as the catalog file is now, and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from abtest.analysis.run_data import INCLUDED, RunData
from abtest.errors import UserError
from abtest.stats.phases import TimeWent, pod_phases, stage_means, where_time_went
from abtest.stats.twoway import TwoWay, two_way

POD_PREFIX = "pod."
STORED = "the run's stored pod parts"
TWO_WAY_METRIC = "batch_ready_s"


@dataclass(frozen=True)
class PodSpecFactor:
    """A factor that changes what the pod carries, and the two values it flips between."""

    name: str
    target: str  # "pod.runtimeClassName" or "pod.annotations.<key>"
    off: str
    on: str
    source: str  # where this was learnt: the run's stored pod parts, or the catalog


def pod_spec_factors(data: RunData, notes: list[str]) -> tuple[PodSpecFactor, ...]:
    """The run's pod-spec factors: from the run's stored pod parts, else the catalog."""
    found = _from_arms(data)
    if found or not data.factors:
        return found
    return _from_catalog(data, notes)


def _from_arms(data: RunData) -> tuple[PodSpecFactor, ...]:
    values: dict[str, dict[str, str]] = {}  # target -> arm -> value
    for arm, key, value in _stored_pod_parts(data):
        values.setdefault(key, {})[arm] = value
    on_sets = {a.name: set(a.on) for a in data.arms}
    out: list[PodSpecFactor] = []
    for target, by_arm in values.items():
        for factor in data.factors:
            on = {v for arm, v in by_arm.items() if factor in on_sets.get(arm, set())}
            off = {v for arm, v in by_arm.items() if factor not in on_sets.get(arm, set())}
            if len(on) == 1 and len(off) == 1 and on != off:
                out.append(PodSpecFactor(factor, target, off.pop(), on.pop(), STORED))
                break
    return tuple(out)


def _stored_pod_parts(data: RunData) -> list[tuple[str, str, str]]:
    """(arm, target, value) of every pod part the run stored: in the arms' settings, or in
    its plan (``arm_pods``: arm -> {target: value})."""
    parts = [
        (arm.name, key, str(json.loads(text)))
        for arm in data.arms
        for key, text in arm.settings
        if key.startswith(POD_PREFIX)
    ]
    arm_pods = data.stored_plan().get("arm_pods")
    if isinstance(arm_pods, dict):
        parts += [
            (str(arm), str(key), str(value))
            for arm, pod in arm_pods.items()
            if isinstance(pod, dict)
            for key, value in pod.items()
            if str(key).startswith(POD_PREFIX)
        ]
    return parts


def _from_catalog(data: RunData, notes: list[str]) -> tuple[PodSpecFactor, ...]:
    name = data.run.get("catalog_name")
    if not isinstance(name, str) or not name:
        return ()
    # Imported here: only a run without stored pod parts needs the catalog (and its YAML).
    from abtest.config.catalog import load_catalog

    try:
        catalog = load_catalog(name)
    except UserError:
        return ()  # a catalog that is gone or renamed: no pod-spec factor can be told
    out: list[PodSpecFactor] = []
    source = f"catalog {name} as it is now (the run stored no pod parts)"
    for factor in catalog.factors:
        if factor.name not in data.factors or not factor.is_pod_spec:
            continue
        keys = [k for k, _ in factor.spec.pod_part(factor, True)]
        if len(keys) != 1:
            continue  # the table crosses one pod field with the kubelet's
        target = keys[0]
        out.append(PodSpecFactor(factor.name, target, str(factor.off), str(factor.on), source))
    if out:
        notes.append(f"pod-spec factors read from the {out[0].source}")
    return tuple(out)


def build_two_way(
    data: RunData, confidence: float, notes: list[str]
) -> tuple[TwoWay | None, PodSpecFactor | None]:
    """The two-way table when the run crosses exactly one pod-spec factor with kubelet ones."""
    pods = pod_spec_factors(data, notes)
    if not pods:
        return None, None
    if len(pods) > 1:
        names = ", ".join(p.name for p in pods)
        notes.append(f"no runtime x settings table: {len(pods)} pod-spec factors ({names})")
        return None, None
    pod = pods[0]
    settings = tuple(f for f in data.factors if f != pod.name)
    if not settings:
        return None, pod
    included = data.rounds[data.rounds[INCLUDED]]
    if included[TWO_WAY_METRIC].notna().sum() == 0:
        return None, pod
    try:
        table = two_way(
            data.stats_frame(TWO_WAY_METRIC),
            arms={a.name: frozenset(a.on) for a in data.arms},
            pod_factor=pod.name,
            settings=settings,
            levels=(pod.off, pod.on),
            metric=TWO_WAY_METRIC,
            confidence=confidence,
        )
    except UserError as exc:
        notes.append(f"no {pod.name} x settings table: {exc.one_line()}")
        return None, pod
    return table, pod


def build_time_went(
    data: RunData, baseline: str | None, confidence: float, notes: list[str]
) -> tuple[TimeWent, ...]:
    """Each arm vs the baseline: the change of each pod phase and kubelet stage."""
    if baseline is None:
        return ()
    rows = data.rounds[data.rounds[INCLUDED] & data.rounds[TWO_WAY_METRIC].notna()]
    if not (rows["arm"] == baseline).any() or rows["arm"].nunique() < 2:
        return ()
    rounds = pd.DataFrame(
        {
            "round_id": rows["id"].astype(int).to_numpy(),
            "arm": rows["arm"].astype(str).to_numpy(),
            "size": rows["size"].astype(int).to_numpy(),
            TWO_WAY_METRIC: rows[TWO_WAY_METRIC].astype(float).to_numpy(),
        }
    )
    labels = rows["block_label"]
    if labels.notna().all():
        rounds["block"] = labels.to_numpy()
    # arms in display order, so the view lists them as every other table does
    rank = {a.name: i for i, a in enumerate(data.arms)}
    rounds = rounds.iloc[
        sorted(range(len(rounds)), key=lambda i: rank.get(rounds["arm"].iloc[i], len(rank)))
    ].reset_index(drop=True)
    analysed = set(rounds["round_id"])
    pods = data.pods[data.pods["round_id"].isin(analysed)]
    deltas = data.deltas[data.deltas["round_id"].isin(analysed)]
    items = pd.concat([pod_phases(pods), stage_means(deltas)], ignore_index=True)
    if items.empty:
        notes.append("where the time went: the analysed rounds kept no pod milestones or stages")
        return ()
    try:
        return where_time_went(rounds, items, baseline=baseline, confidence=confidence)
    except UserError as exc:
        notes.append(f"where the time went: {exc.one_line()}")
        return ()
