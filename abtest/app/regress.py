"""`abtest regress`'s use-case: one verdict from exactly one source of rounds (live on the
nodes, two stored runs, or a rounds file), as :class:`~abtest.stats.regress_result.RegressResult`.

A program calls :func:`run_regress` with a :class:`RegressRequest` exactly as the command does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from abtest.app.reach import Reach
from abtest.config.margin import check_margin
from abtest.config.playbook import load_playbook
from abtest.engine import regress_rounds
from abtest.errors import AbtestError, UserError
from abtest.ingest.rounds import RoundsSource, load_rounds
from abtest.ingest.rounds_csv import require_metrics
from abtest.stats.regress_result import RegressResult
from abtest.store.db import Store


@dataclass(frozen=True)
class RegressRequest:
    """What to compare and how. Exactly one source: ``profiles`` (live), the two stored runs,
    or ``rounds`` (a CSV or another tool's runs). None means the playbook's value."""

    playbook: str = "regression"
    reference: str | None = None  # live: a node state SPEC; a rounds file: the arm
    candidate: str | None = None
    profiles: tuple[str, ...] = ()
    reference_run: str | None = None
    candidate_run: str | None = None
    rounds: RoundsSource = field(default_factory=RoundsSource)
    sizes: tuple[int, ...] | None = None
    metrics: tuple[str, ...] = ()
    margin_pct: float | None = None
    first_look: int | None = None  # blocks before the first look (live)
    max_rounds: int | None = None
    confidence: float | None = None
    seed: int | None = None
    reach: Reach = field(default_factory=Reach)


def run_regress(req: RegressRequest, say: Callable[[str], None]) -> RegressResult:
    """The verdict. UserError for a bad request; a live measurement that fails for any other
    reason is :class:`~abtest.engine.regress_live.CouldNotMeasure` (exit 4)."""
    pb = load_playbook(req.playbook)
    # The playbook's margin passed the same rule when it was loaded.
    margin_pct = (
        pb.margin_pct if req.margin_pct is None else check_margin(req.margin_pct, "--margin")
    )
    confidence = pb.confidence if req.confidence is None else req.confidence
    metrics = list(req.metrics) or list(pb.metrics)
    sizes = list(req.sizes) if req.sizes else None
    modes = [req.rounds.given, bool(req.reference_run or req.candidate_run), bool(req.profiles)]
    if sum(modes) != 1:
        raise UserError(
            "choose one source",
            "abtest regress",
            "--profile (live), --reference-run/--candidate-run, --csv, --kube-burner or "
            "--clusterloader2",
        )
    if req.rounds.given:
        if not (req.reference and req.candidate):
            raise UserError(
                "--csv/--kube-burner/--clusterloader2 need --reference ARM and --candidate ARM",
                "abtest regress",
            )
        loaded = load_rounds(req.rounds)
        metrics = require_metrics(loaded.frame, metrics, loaded.source)
        for note in loaded.notes:
            say(f"note: {note}")
        return regress_rounds.regress_from_frame(
            loaded.frame,
            reference=req.reference,
            candidate=req.candidate,
            sizes=sizes,
            metrics=metrics,
            margin_pct=margin_pct,
            confidence=confidence,
            source=f"csv {req.rounds.csv}" if req.rounds.csv else loaded.source,
        )
    if req.reference_run or req.candidate_run:
        if not (req.reference_run and req.candidate_run):
            raise UserError("give both --reference-run and --candidate-run", "abtest regress")
        with Store(req.reach.db) as store:
            frame = regress_rounds.rounds_of_two_runs(store, req.reference_run, req.candidate_run)
        return regress_rounds.regress_from_frame(
            frame,
            reference="reference",
            candidate="candidate",
            sizes=sizes,
            metrics=metrics,
            margin_pct=margin_pct,
            confidence=confidence,
            source=f"runs {req.reference_run} (reference) vs {req.candidate_run} (candidate)",
        )
    # Imported only for a live gate: the node and cluster layers (paramiko, the Kubernetes
    # client) cost the file and stored-run gates seconds of start-up.
    from abtest.app.profiles import load_profiles
    from abtest.engine.regress_live import CouldNotMeasure, LiveRegressOptions, run_live

    live = LiveRegressOptions(
        profile=req.profiles[0],
        profiles=req.profiles,
        playbook=pb,
        reference=req.reference or "default",
        candidate=req.candidate or "default",
        sizes=req.sizes or pb.sizes,
        metrics=tuple(metrics),
        margin_pct=margin_pct,
        confidence=confidence,
        rounds=req.first_look or pb.rounds,
        max_rounds=req.max_rounds or pb.max_rounds,
        seed=pb.seed if req.seed is None else req.seed,
        accept_new_host_key=req.reach.accept_new_host_key,
        nodes=load_profiles(req.profiles, req.reach.kubeconfig, req.reach.context)
        if req.reach.kubeconfig or req.reach.context
        else (),
    )
    try:
        with Store(req.reach.db) as store:
            return run_live(live, store, say=say)
    except UserError:
        raise
    except AbtestError as exc:
        # a node or the cluster failed under the measurement: no verdict, and exit 4 says so
        raise CouldNotMeasure(f"could not measure: {exc}") from exc
