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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from abtest.analysis.bisect import BisectModel, build_times, conclude
from abtest.app.bisect_builds import (
    Builder,
    LabBuilder,
    PlacedBuilder,
    build_range,
    lab_profile,
    served_builds,
)
from abtest.app.bisect_state import (
    METRICS,
    BisectParameters,
    StoredBisection,
    check_metric,
    check_size,
    read_bisection,
    stored_form,
    stored_playbook,
)
from abtest.app.reach import Reach
from abtest.config import numbers as num
from abtest.config.kubelet_series import BuildName, parse_build_name
from abtest.config.margin import check_margin
from abtest.config.playbook import NodeProfile, load_playbook
from abtest.errors import AbtestError, UserError
from abtest.store.db import Store

if TYPE_CHECKING:  # the node layer is imported only when a bisection runs
    from abtest.engine.sweep_nodes import NodeKit

Say = Callable[[str], None]
#: what a new bisection uses when the option is not given (on --resume: the stored one)
DEFAULT_PLAYBOOK, DEFAULT_PROFILES, DEFAULT_METRIC = "lab-regression", ("lab",), "batch-ready"


@dataclass(frozen=True)
class BisectRequest:
    """The command line; None (or empty) is an option not given."""

    good: str | None = None
    bad: str | None = None
    builds: tuple[str, ...] = ()
    playbook: str | None = None
    profiles: tuple[str, ...] = ()
    metric: str | None = None
    size: int | None = None
    max_blocks: int | None = None
    margin_pct: float | None = None
    seed: int | None = None
    resume: str | None = None
    reach: Reach = field(default_factory=Reach)


def settings_of(
    req: BisectRequest, releases: Callable[..., list[BuildName]] | None
) -> BisectParameters:
    """The request checked whole (range, metric, size, blocks) before anything runs."""
    playbook = req.playbook or DEFAULT_PLAYBOOK
    pb = load_playbook(playbook)
    metric = check_metric(req.metric or DEFAULT_METRIC, "--metric")
    size = check_size(req.size if req.size is not None else pb.sizes[0], pb, "--size")
    max_blocks = req.max_blocks or pb.max_rounds
    num.MAX_ROUNDS.check(max_blocks, "--max-blocks")
    margin = pb.margin_pct if req.margin_pct is None else check_margin(req.margin_pct, "--margin")
    builds = build_range(req.good, req.bad, req.builds, releases or served_builds)
    return BisectParameters(
        tuple(stored_form(b) for b in builds),
        tuple(builds),
        playbook,
        req.profiles or DEFAULT_PROFILES,
        metric,
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

    stored: StoredBisection | None = None
    if req.resume:
        if not Store.exists(req.reach.db):
            raise UserError("no results database here", "--db", "give the bisection's --db")
        with Store(req.reach.db) as store:
            stored = read_bisection(store, req.resume)  # checked whole, or refused
        refuse_changed_options(req, stored)
        settings, pb = stored.settings, stored_playbook(stored)
    else:
        settings = settings_of(req, releases)  # checked whole before a database is opened
        pb = load_playbook(settings.playbook)
    nodes = nodes or _nodes(req, settings)
    chosen = builder or (
        LabBuilder() if all(lab_profile(n.kubelet_builds_dir) for n in nodes) else PlacedBuilder()
    )
    chosen.check([settings.build(n) for n in settings.names])
    with Store(req.reach.db) as store:
        search = Search(store, settings, pb, nodes, chosen, say, kit, req.reach.accept_new_host_key)
        try:
            search.run(stored)
        except UserError:
            raise
        except BaseException as exc:  # an interruption, a lost node, a bug: the same hint
            if search.root:  # the node was restored; what was decided is kept
                say(f"stopped; go on with: abtest bisect --resume {search.root}")
            from abtest.engine.regress_live import CouldNotMeasure

            if isinstance(exc, AbtestError) and not isinstance(exc, CouldNotMeasure):
                # a node or the cluster failed under the measurement: exit 4 says so
                raise CouldNotMeasure(f"could not measure: {exc}") from exc
            raise
        return bisection_model(store, search.root or "")


def _nodes(req: BisectRequest, settings: BisectParameters) -> tuple[NodeProfile, ...]:
    from abtest.app.profiles import load_profiles

    return load_profiles(settings.profiles, req.reach.kubeconfig, req.reach.context)


def refuse_changed_options(req: BisectRequest, stored: StoredBisection) -> None:
    """--resume measures with the stored range and settings: an option given again must say
    the same, else UserError naming it and what is stored (docs/bisect.md). --kubeconfig,
    --context and --accept-new-host-key are this command's (how to reach the cluster and the
    node, not what is measured) and are not compared."""
    for flag, value, kept, what in _given(req, stored.settings):
        if value == kept:
            continue
        shown, stored_shown = _shown(value), _shown(kept)
        if shown == stored_shown:  # the same names: the series' folders differ
            shown, stored_shown = _shown(value, folders=True), _shown(kept, folders=True)
        raise UserError(
            f"{shown} differs from the {what} bisection {stored.root} stored, {stored_shown}",
            flag,
            f"leave {flag} out to go on with the stored one, or start a new bisection",
        )


def _given(req: BisectRequest, s: BisectParameters) -> list[tuple[str, object, object, str]]:
    """(flag, value given, value stored, what it is) of each option given, read as a new
    bisection reads it (the same checks: a bad value is refused as it would be there)."""

    def form(text: str, flag: str) -> tuple[str, str | None]:
        return stored_form(parse_build_name(text, flag))

    names = {col: name for name, col in METRICS.items()}
    given: list[tuple[str, object, object, str]] = []
    if req.builds:
        listed = tuple(form(b, "--builds") for b in req.builds)
        given.append(("--builds", listed, s.builds, "range"))
    if req.good:
        given.append(("--good", form(req.good, "--good"), s.builds[0], "good end"))
    if req.bad:
        given.append(("--bad", form(req.bad, "--bad"), s.builds[-1], "bad end"))
    if req.playbook:
        given.append(("--playbook", req.playbook, s.playbook, "playbook"))
    if req.profiles:
        given.append(("--profile", req.profiles, s.profiles, "profiles"))
    if req.metric:
        check_metric(req.metric, "--metric")
        given.append(("--metric", req.metric, names[s.metric], "metric"))
    if req.margin_pct is not None:
        given.append(("--margin", check_margin(req.margin_pct, "--margin"), s.margin_pct, "margin"))
    for flag, value, kept, what in (
        ("--size", req.size, s.size, "size"),
        ("--max-blocks", req.max_blocks, s.max_blocks, "cap of blocks"),
        ("--seed", req.seed, s.seed, "seed"),
    ):
        if value is not None:
            given.append((flag, value, kept, what))
    return given


def _shown(value: object, folders: bool = False) -> str:
    """A value as the option reads: builds by name (or by folder), lists joined."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        name, folder = value
        if name.startswith("v"):  # a build (name, series folder)
            return f"{name} (folder {folder})" if folders else name
    if isinstance(value, tuple):
        return ",".join(_shown(v, folders) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def bisection_model(store: Store, root: str, done: bool = True) -> BisectModel:
    """The model of a stored bisection (for the command's last lines and `abtest report`)."""
    stored = read_bisection(store, root)
    settings, records = stored.settings, stored.records
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
