"""`abtest regress`: is the candidate slower than the reference beyond a margin?

Exit codes: 0 PASS, 1 FAIL, 3 INCONCLUSIVE (at the cap), 4 could not measure, 2 usage.
"""

from __future__ import annotations

from pathlib import Path

import typer

from abtest.cli import options as o
from abtest.cli import sources
from abtest.cli.render import console, err_console, print_json
from abtest.cli.rounds_csv import require_metrics
from abtest.errors import AbtestError, UserError
from abtest.experiment import regress as gate
from abtest.margin import check_margin
from abtest.playbook import load_playbook, load_profile
from abtest.report.verdict import describe, junit_xml, markdown_summary
from abtest.stats.gate import EXIT_COULD_NOT_MEASURE, GateResult
from abtest.store.db import Store


def regress(
    reference: str = typer.Option(
        None, "--reference", help="Live: a node state SPEC. With --csv: the reference arm."
    ),
    candidate: str = typer.Option(
        None, "--candidate", help="Live: a node state SPEC. With --csv: the candidate arm."
    ),
    profile: list[str] = typer.Option(
        None,
        "--profile",
        help="Node profile (live measurement); repeat for several nodes: every node runs the "
        "schedule at once, their blocks make one verdict.",
    ),
    playbook: str = typer.Option("regression", "--playbook", help="Playbook name or path."),
    reference_run: str = typer.Option(None, "--reference-run", help="A stored run."),
    candidate_run: str = typer.Option(None, "--candidate-run", help="A stored run."),
    csv: Path = typer.Option(
        None, "--csv", help="Rounds CSV (the format of abtest analyze; duplicate rows refused)."
    ),
    kube_burner: Path | None = sources.KUBE_BURNER,
    clusterloader2: Path | None = sources.CLUSTERLOADER2,
    arm_globs: list[str] | None = sources.ARM,
    job: str | None = sources.JOB,
    block: str | None = sources.BLOCK,
    run_size: int | None = sources.SIZE,
    latency: str | None = sources.LATENCY,
    sizes: str = o.SIZES,
    metric: list[str] = typer.Option(None, "--metric", help="Metric(s); default: playbook's."),
    margin: float = typer.Option(
        None, "--margin", help="Allowed slowdown in percent, 0 or more; default: playbook's."
    ),
    rounds: int = typer.Option(None, "--rounds", min=2, help="Blocks before the first look."),
    max_rounds: int = typer.Option(None, "--max-rounds", min=2, help="Cap on blocks."),
    confidence: float = typer.Option(None, "--confidence", help="Across all looks."),
    seed: int = o.SEED,
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here."),
    summary: Path = typer.Option(None, "--summary", help="Write a Markdown summary here."),
    accept_new_host_key: bool = typer.Option(False, "--accept-new-host-key"),
    db: Path = o.DB,
    kubeconfig: str | None = o.KUBECONFIG,
    context: str | None = o.CONTEXT,
    json_out: bool = o.JSON,
) -> None:
    """Decide PASS / FAIL / INCONCLUSIVE for a candidate kubelet (binary and/or settings)
    against a reference, live on a node, from two stored runs, or from a rounds CSV.

    SPEC: comma-separated `binary=/path/on/node` and/or `featureGates.X=true`,
    `kubeAPIQPS=5`, ...; `default` is the node as it is."""
    pb = load_playbook(playbook)
    # The playbook's margin passed the same rule when it was loaded.
    margin_pct = pb.margin_pct if margin is None else check_margin(margin, "--margin")
    conf = pb.confidence if confidence is None else confidence
    metrics = _metrics(metric) or list(pb.metrics)
    chosen_sizes = o.parse_sizes(sizes)
    rounds_file = csv or kube_burner or clusterloader2
    modes = [bool(rounds_file), bool(reference_run or candidate_run), bool(profile)]
    if sum(modes) != 1:
        raise UserError(
            "choose one source",
            "abtest regress",
            "--profile (live), --reference-run/--candidate-run, --csv, --kube-burner or "
            "--clusterloader2",
        )
    if rounds_file:
        if not (reference and candidate):
            raise UserError(
                "--csv/--kube-burner/--clusterloader2 need --reference ARM and --candidate ARM",
                "abtest regress",
            )
        loaded = sources.load_rounds(
            csv, kube_burner, clusterloader2, arm_globs, job, block, run_size, latency
        )
        rounds_df = loaded.frame
        metrics = require_metrics(rounds_df, metrics, loaded.source)
        for note in loaded.notes:
            err_console.print(f"note: {note}", highlight=False)
        result = gate.gate_from_frame(
            rounds_df,
            reference=reference,
            candidate=candidate,
            sizes=list(chosen_sizes) if chosen_sizes else None,
            metrics=metrics,
            margin_pct=margin_pct,
            confidence=conf,
            source=f"csv {csv}" if csv else loaded.source,
        )
    elif reference_run or candidate_run:
        if not (reference_run and candidate_run):
            raise UserError("give both --reference-run and --candidate-run", "abtest regress")
        with Store(db) as store:
            frame = gate.rounds_of_two_runs(store, reference_run, candidate_run)
        result = gate.gate_from_frame(
            frame,
            reference="reference",
            candidate="candidate",
            sizes=list(chosen_sizes) if chosen_sizes else None,
            metrics=metrics,
            margin_pct=margin_pct,
            confidence=conf,
            source=f"runs {reference_run} (reference) vs {candidate_run} (candidate)",
        )
    else:
        from abtest.experiment.regress_live import LiveGateOptions, run_live

        live = LiveGateOptions(
            profile=profile[0],
            profiles=tuple(profile),
            playbook=pb,
            reference=reference or "default",
            candidate=candidate or "default",
            sizes=chosen_sizes or pb.sizes,
            metrics=tuple(metrics),
            margin_pct=margin_pct,
            confidence=conf,
            rounds=rounds or pb.rounds,
            max_rounds=max_rounds or pb.max_rounds,
            seed=pb.seed if seed is None else seed,
            accept_new_host_key=accept_new_host_key,
            nodes=tuple(o.with_kube(load_profile(p), kubeconfig, context) for p in profile)
            if kubeconfig or context
            else (),
        )
        try:
            with Store(db) as store:
                result = run_live(live, store, say=lambda m: err_console.print(m, highlight=False))
        except UserError:
            raise
        except AbtestError as exc:
            err_console.print(f"[red]could not measure: {exc}[/red]")
            raise typer.Exit(EXIT_COULD_NOT_MEASURE) from None
    _emit(result, junit, summary, json_out)
    raise typer.Exit(result.exit_code)


def _metrics(values: list[str] | None) -> list[str]:
    return [m.strip() for v in values or [] for m in v.split(",") if m.strip()]


def _emit(result: GateResult, junit: Path | None, summary: Path | None, json_out: bool) -> None:
    if junit:
        junit.write_text(junit_xml(result))
    if summary:
        summary.write_text(markdown_summary(result))
    if json_out:
        print_json(
            {
                "verdict": result.verdict,
                "exit_code": result.exit_code,
                "source": result.source,
                "run_id": result.run_id,
                "looks": result.looks,
                "max_looks": result.max_looks,
                "decisions": [
                    {
                        "size": d.size,
                        "metric": d.metric,
                        "verdict": d.verdict,
                        "slowdown_pct": d.slowdown_pct,
                        "slowdown_ci": d.slowdown_ci,
                        "margin_pct": d.margin_pct,
                        "reference_mean": d.reference_mean,
                        "candidate_mean": d.candidate_mean,
                        "n_reference": d.n_reference,
                        "n_candidate": d.n_candidate,
                        "look_confidence": d.look_confidence,
                        "decisions": d.decisions,
                        "n_pairs": d.n_pairs,
                        "method": d.method,
                        "p_value": d.p_value,
                        "note": d.note,
                    }
                    for d in result.decisions
                ],
            }
        )
        return
    for d in result.decisions:
        console.print(describe(d), highlight=False)
    console.print(f"verdict: {result.verdict} ({result.source})", highlight=False)
