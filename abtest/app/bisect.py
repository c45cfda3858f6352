"""`abtest bisect`'s use case: which build of an ordered range made pod start-up slower.

First the ends (the regression gate: bad as candidate against good); then a binary search, each
step measuring the middle build against the two ends it lies between
(:mod:`abtest.stats.bisect` decides). Every measurement is an ordinary stored run of kind
``bisect`` whose plan carries a ``bisect`` entry (the first run's also the request), so
``--resume FIRST_RUN`` replays the decided steps and goes on where the search stopped. Builds
are checked before anything is built, each is built and placed just before it is measured, and
the sweep engine puts the node's own kubelet back on every exit path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abtest.analysis.bisect import (
    ENTRY,
    BisectModel,
    StepRecord,
    build_times,
    conclude,
)
from abtest.app.bisect_builds import (
    Builder,
    LabBuilder,
    PlacedBuilder,
    build_range,
    lab_profile,
    served_builds,
)
from abtest.config.kubelet_series import BuildName, parse_build_name
from abtest.config.margin import check_margin
from abtest.config.playbook import NodeProfile, load_playbook
from abtest.errors import AbtestError, UserError
from abtest.store.db import DbTarget, Store

if TYPE_CHECKING:  # the node layer is imported only when a bisection runs
    from abtest.engine.nodekit import NodeKit

#: --metric names and the rounds column each decides on
METRICS = {"batch-ready": "batch_ready_s", "p95": "p95_s"}
Say = Callable[[str], None]


@dataclass(frozen=True)
class BisectRequest:
    good: str | None = None
    bad: str | None = None
    builds: tuple[str, ...] = ()
    playbook: str = "lab-regression"
    profiles: tuple[str, ...] = ("lab",)
    metric: str = "batch-ready"
    size: int | None = None
    max_blocks: int | None = None
    margin_pct: float | None = None
    seed: int | None = None
    resume: str | None = None
    accept_new_host_key: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    db: DbTarget = None


@dataclass(frozen=True)
class Settings:
    """What the whole search uses, as stored in its first run (so --resume is the same)."""

    builds: tuple[tuple[str, str | None], ...]  # (name, series folder or None)
    playbook: str
    profiles: tuple[str, ...]
    metric: str
    size: int
    margin_pct: float
    confidence: float
    first_look: int
    max_blocks: int
    seed: int

    def build(self, name: str) -> BuildName:
        folder = dict(self.builds)[name]
        found = parse_build_name(name, "bisection build", paths=False)
        return (
            found
            if folder is None
            else BuildName(found.release, found.series, Path(folder), found.prefix)
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.builds)


def settings_of(req: BisectRequest, releases: Callable[..., list[BuildName]] | None) -> Settings:
    """The request checked whole (range, metric, size, blocks) before anything runs."""
    pb = load_playbook(req.playbook)
    if req.metric not in METRICS:
        raise UserError(
            f"unknown metric {req.metric!r}", "--metric", f"one of {', '.join(METRICS)}"
        )
    size = req.size if req.size is not None else pb.sizes[0]
    if size not in pb.sizes:
        raise UserError(
            f"size {size} is not in playbook {pb.name}",
            "--size",
            f"the playbook measures {', '.join(map(str, pb.sizes))} pods",
        )
    max_blocks = req.max_blocks or pb.max_rounds
    if max_blocks < 2:
        raise UserError(f"--max-blocks {max_blocks} is below 2", "--max-blocks", "at least 2")
    margin = pb.margin_pct if req.margin_pct is None else check_margin(req.margin_pct, "--margin")
    builds = build_range(req.good, req.bad, req.builds, releases or served_builds)
    return Settings(
        tuple((b.name, str(b.folder) if b.folder and b.series else None) for b in builds),
        req.playbook,
        req.profiles,
        METRICS[req.metric],
        size,
        margin,
        pb.confidence,
        min(pb.rounds, max_blocks),
        max_blocks,
        pb.seed if req.seed is None else req.seed,
    )


def run_bisect(
    req: BisectRequest,
    say: Say,
    *,
    kit: NodeKit | None = None,
    builder: Builder | None = None,
    releases: Callable[..., list[BuildName]] | None = None,
    nodes: tuple[NodeProfile, ...] = (),
) -> BisectModel:
    """Run (or resume) the bisection; its model as `abtest report` shows it. UserError for a bad
    request, before anything is built or the node touched. ``kit``, ``builder``, ``releases``
    and ``nodes`` (profiles already loaded) stand in for the real ones in tests."""
    # imported here: the node and cluster layers cost `bisect --help` and bad input seconds
    from abtest.app.bisect_search import Search

    root: str | None = None
    records: list[StepRecord] = []
    if req.resume:
        if not Store.exists(req.db):
            raise UserError("no results database here", "--db", "give the bisection's --db")
        with Store(req.db) as store:
            root, settings, records = load_bisection(store, req.resume)
    else:
        settings = settings_of(req, releases)  # checked whole before a database is opened
    pb = load_playbook(settings.playbook)
    nodes = nodes or _nodes(req, settings)
    chosen = builder or (
        LabBuilder() if all(lab_profile(n.kubelet_builds_dir) for n in nodes) else PlacedBuilder()
    )
    chosen.check([settings.build(n) for n in settings.names])
    with Store(req.db) as store:
        search = Search(store, settings, pb, nodes, chosen, say, kit, req.accept_new_host_key)
        try:
            search.run(root, records)
        except UserError:
            raise
        except BaseException as exc:  # an interruption, a lost node, a bug: the same hint
            if search.root:  # the node was restored; what was decided is kept
                say(f"stopped; go on with: abtest bisect --resume {search.root}")
            from abtest.engine.gate_live import CouldNotMeasure

            if isinstance(exc, AbtestError) and not isinstance(exc, CouldNotMeasure):
                # a node or the cluster failed under the measurement: exit 4 says so
                raise CouldNotMeasure(f"could not measure: {exc}") from exc
            raise
        return bisection_model(store, search.root or "")


def _nodes(req: BisectRequest, settings: Settings) -> tuple[NodeProfile, ...]:
    from abtest.app.profiles import load_profiles

    names = req.profiles if not req.resume else settings.profiles
    return load_profiles(names, req.kubeconfig, req.context)


def load_bisection(store: Store, run_id: str) -> tuple[str, Settings, list[StepRecord]]:
    """A stored bisection's settings and decided measurements, from its first run's id."""
    entry = store.runs.plan(run_id).get(ENTRY)
    if not isinstance(entry, dict) or "settings" not in entry:
        raise UserError(
            f"run {run_id} is not a bisection",
            "--resume",
            "give the first run `abtest bisect` printed (kind bisect, see `abtest runs`)",
        )
    s = entry["settings"]
    try:
        settings = Settings(
            tuple((str(n), None if f is None else str(f)) for n, f in s["builds"]),
            str(s["playbook"]),
            tuple(str(p) for p in s["profiles"]),
            str(s["metric"]),
            int(s["size"]),
            float(s["margin_pct"]),
            float(s["confidence"]),
            int(s["first_look"]),
            int(s["max_blocks"]),
            int(s["seed"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"run {run_id}'s bisection entry is malformed ({type(exc).__name__})", "--resume"
        ) from None
    return run_id, settings, records_of(store, run_id)


def records_of(store: Store, root: str) -> list[StepRecord]:
    """The decided measurements of the bisection ``root``, in order (undecided ones: none)."""
    found = []
    for _run, entry in store.runs.with_plan_entry("bisect", ENTRY):
        if isinstance(entry, dict) and entry.get("root") == root and entry.get("record"):
            found.append(StepRecord.from_json(entry["record"]))
    return sorted(found, key=lambda r: r.index)


def pending_run(store: Store, root: str, index: int) -> str | None:
    """The run of measurement ``index`` that started but did not decide (to resume), if any."""
    for run, entry in store.runs.with_plan_entry("bisect", ENTRY):
        if isinstance(entry, dict) and entry.get("root") == root and entry.get("index") == index:
            return run
    return None


def settings_json(settings: Settings) -> dict[str, Any]:
    return {
        "builds": [list(b) for b in settings.builds],
        "playbook": settings.playbook,
        "profiles": list(settings.profiles),
        "metric": settings.metric,
        "size": settings.size,
        "margin_pct": settings.margin_pct,
        "confidence": settings.confidence,
        "first_look": settings.first_look,
        "max_blocks": settings.max_blocks,
        "seed": settings.seed,
    }


def bisection_model(store: Store, root: str, done: bool = True) -> BisectModel:
    """The model of a stored bisection (for the command's last lines and `abtest report`)."""
    _, settings, records = load_bisection(store, root)
    names = settings.names
    frames = []
    for r in records:
        df = store.rounds_frame(r.run_id)
        df = df[(df["accepted"] == 1) & (df["warmup"] == 0) & (df["size"] == settings.size)]
        arms = dict(
            zip(("good", "bad") if r.index == 0 else ("low", "mid", "high"), r.builds, strict=True)
        )
        frames.append(df.assign(build=df["arm"].map(arms)))
    import pandas as pd

    rounds = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"build": []})
    if settings.metric not in rounds.columns:
        rounds[settings.metric] = []
    conclusion = conclude(names, records, done)
    return BisectModel(
        root,
        names,
        settings.size,
        settings.metric,
        settings.margin_pct,
        tuple(records),
        conclusion,
        build_times(rounds, settings.metric, names),
    )
