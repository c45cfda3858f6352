"""`abtest regress`: is the candidate slower than the reference beyond a margin?

Exit codes: 0 PASS, 1 FAIL, 3 INCONCLUSIVE (at the cap), 4 could not measure, 2 usage.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from abtest.app.regress import RegressRequest, run_regress
from abtest.cli import groups as g
from abtest.cli import options as o
from abtest.cli import sources as s
from abtest.cli.render import console, echo, err_console, print_json, progress
from abtest.config import numbers as num
from abtest.config.paths import write_output
from abtest.errors import UserError
from abtest.ingest.rounds import RoundsSource
from abtest.report.verdict import describe, junit_xml, markdown_summary
from abtest.stats.regress_result import RegressResult


@s.OTHER_TOOLS.into("tools")
@g.LIVE_RUN.into("live")
def regress(
    *,
    reference: Annotated[
        str | None,
        typer.Option("--reference", help="Live: a node state SPEC. With --csv: the reference arm."),
    ] = None,
    candidate: Annotated[
        str | None,
        typer.Option("--candidate", help="Live: a node state SPEC. With --csv: the candidate arm."),
    ] = None,
    profile: Annotated[
        list[str] | None,
        typer.Option(
            "--profile",
            help="Node profile (live measurement): a path to an existing YAML file is that file, "
            "otherwise a shipped name (lab, kubeadm-systemd); repeat for several nodes: every "
            "node runs the schedule at once, their blocks make one verdict.",
        ),
    ] = None,
    playbook: o.Playbook = "regression",
    reference_run: Annotated[
        str | None, typer.Option("--reference-run", help="A stored run.")
    ] = None,
    candidate_run: Annotated[
        str | None, typer.Option("--candidate-run", help="A stored run.")
    ] = None,
    csv: Annotated[
        Path | None,
        typer.Option(
            "--csv",
            help="Rounds CSV (the format of abtest analyze; duplicate rows refused).",
        ),
    ] = None,
    tools: RoundsSource,
    sizes: o.Sizes = None,
    metric: Annotated[
        list[str] | None, typer.Option("--metric", help="Metric(s); default: playbook's.")
    ] = None,
    margin: o.Margin = None,
    rounds: Annotated[
        int | None, o.ranged("--rounds", num.MAX_ROUNDS, "Blocks before the first look.")
    ] = None,
    max_rounds: Annotated[
        int | None, o.ranged("--max-rounds", num.MAX_ROUNDS, "Cap on blocks.")
    ] = None,
    confidence: Annotated[
        float | None, typer.Option("--confidence", help="Across all looks.")
    ] = None,
    seed: o.Seed = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here.")] = None,
    summary: Annotated[
        Path | None, typer.Option("--summary", help="Write a Markdown summary here.")
    ] = None,
    live: g.LiveRun,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Measure nothing: print how often this gate PASSes an unchanged candidate and "
            "FAILs one slower by twice the margin, its blocks and node time, from the node's "
            "earlier runs (--profile) or a pilot (--csv ...). Writes no --junit or --summary "
            "file (a plan is no verdict), and says so on stderr.",
        ),
    ] = False,
) -> None:
    """Decide PASS / FAIL / INCONCLUSIVE for a candidate kubelet (binary and/or settings)
    against a reference, live on a node, from two stored runs, or from a rounds CSV.

    SPEC: comma-separated `binary=/path/on/node` (or `binary=v1.35.4`, a kubelet release
    placed in the profile's kubelet.builds_dir, e.g. by `abtest lab kubelets v1.35.4`) and/or
    `featureGates.X=true`, `kubeAPIQPS=5`, ...; `default` is the node as it is. Every binary is
    read before anything changes: its version (the skew policy) and the gates it knows."""
    request = RegressRequest(
        playbook=playbook,
        reference=reference,
        candidate=candidate,
        profiles=tuple(profile or ()),
        reference_run=reference_run,
        candidate_run=candidate_run,
        rounds=replace(tools, csv=csv),
        sizes=o.parse_sizes(sizes),
        metrics=tuple(m.strip() for v in metric or [] for m in v.split(",") if m.strip()),
        margin_pct=margin,
        first_look=rounds,
        max_rounds=max_rounds,
        confidence=confidence,
        seed=seed,
        reach=live.reach(),
    )
    if plan:
        from abtest.app.regress_plan import describe_plan, plan_regress

        report = plan_regress(request, progress)
        for path, flag in ((junit, "--junit"), (summary, "--summary")):
            if path is not None:  # a pipeline that keeps --junit must not read a stale file
                err_console.print(
                    f"note: --plan measures nothing: no {flag} file written ({path})",
                    highlight=False,
                )
        if live.json_out:
            print_json(report.to_dict())
        else:
            echo(describe_plan(report), nl=False)
        raise typer.Exit(0)
    result = run_regress(request, say=progress)
    _emit(result, junit, summary, live.json_out)
    raise typer.Exit(result.exit_code)


def _emit(result: RegressResult, junit: Path | None, summary: Path | None, json_out: bool) -> None:
    """The verdict first, then the files: a report path that cannot be written is one error
    line, and the exit code stays the verdict's (exit 1 means FAIL to a pipeline, and a typo
    in --junit must not read as a kubelet regression)."""
    if json_out:
        print_json(result.to_dict())
    else:
        for d in result.decisions:
            console.print(describe(d), highlight=False)
        console.print(f"verdict: {result.verdict} ({result.source})", highlight=False)
    outputs = ((junit, "--junit", junit_xml), (summary, "--summary", markdown_summary))
    for path, flag, render in outputs:
        if path is None:
            continue
        try:
            write_output(path, render(result), flag)
        except UserError as exc:
            err_console.print(
                f"abtest: error: {exc.one_line()}; the verdict above stands "
                f"(exit {result.exit_code})",
                highlight=False,
                style="red",
                soft_wrap=True,  # one line, however narrow the terminal
            )
