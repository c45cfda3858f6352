"""`abtest bisect`: which build of a range made pod start-up slower.

Exit codes: 0 a first bad build named, 3 none named (the ends not confirmed, the slowdown spread
or not placed at the cap), 4 could not measure, 2 usage."""

from __future__ import annotations

from typing import Annotated

import typer

from abtest.app.bisect import (
    DEFAULT_METRIC,
    DEFAULT_PLAYBOOK,
    BisectRequest,
    run_bisect,
)
from abtest.app.bisect_state import METRICS
from abtest.cli import groups as g
from abtest.cli import options as o
from abtest.cli.render import console, print_json, progress
from abtest.config import numbers as num
from abtest.report.bisect import exit_code, summary_lines


@g.LIVE_RUN.into("live")
def bisect(
    *,
    good: Annotated[
        str | None, typer.Option("--good", help="The good build: v1.34.4, or v1.36.3.")
    ] = None,
    bad: Annotated[
        str | None,
        typer.Option("--bad", help="The bad build: v1.36.3, or v1.36.3+SERIES (its prefixes)."),
    ] = None,
    builds: Annotated[
        str | None,
        typer.Option(
            "--builds",
            help="The ordered builds, good first, comma-separated without spaces (instead of a "
            "range); a build the lab placed is named by its placed name (v1.36.3+FOLDERNAME).",
        ),
    ] = None,
    playbook: Annotated[
        str | None,
        typer.Option("--playbook", help=f"Playbook name or path (default: {DEFAULT_PLAYBOOK})."),
    ] = None,
    profile: o.Profiles = None,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric", help=f"What decides: {' or '.join(METRICS)} (default: {DEFAULT_METRIC})."
        ),
    ] = None,
    size: Annotated[
        int | None, o.ranged("--size", num.SIZE, "Pods per batch; one of the playbook's.")
    ] = None,
    max_blocks: Annotated[
        int | None,
        o.ranged(
            "--max-blocks",
            num.MAX_ROUNDS,
            "Cap on blocks per step (default: the playbook's max_rounds).",
        ),
    ] = None,
    margin: o.Margin = None,
    seed: o.Seed = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            help="Go on with a stopped bisection (its first run's id), with its stored range and "
            "settings: an option given again must match them (only --kubeconfig, --context and "
            "--accept-new-host-key are this command's).",
        ),
    ] = None,
    live: g.LiveRun,
) -> None:
    """Find the first build of an ordered range (releases, a patch series' prefixes, or a
    list) that made pod start-up slower.

    The range: the final releases the Go module proxy serves from --good to --bad; the prefixes
    of a patch series (--good v1.36.3 --bad v1.36.3+SERIES: v1.36.3, v1.36.3+SERIES.p1, ...); or
    --builds. The ends are confirmed first with the regression gate (bad slower than good beyond
    the margin); then each step builds and places the middle build, measures it against the two
    ends in randomized blocks, adding blocks until one half is shown slower (up to --max-blocks).
    Every step is a stored run; --resume FIRST_RUN goes on; `abtest report FIRST_RUN` renders it.
    The node's own kubelet is put back on every exit path."""
    request = BisectRequest(
        good=good,
        bad=bad,
        # each name whole, as --good takes it: nothing trimmed, an empty item refused
        builds=tuple(builds.split(",")) if builds is not None else (),
        playbook=playbook,
        profiles=tuple(profile or ()),
        metric=metric,
        size=size,
        max_blocks=max_blocks,
        margin_pct=margin,
        seed=seed,
        resume=resume,
        reach=live.reach(),
    )
    model = run_bisect(request, say=progress)
    if live.json_out:
        print_json(model.to_dict())
    else:
        for line in summary_lines(model):
            console.print(line, highlight=False, soft_wrap=True)
    raise typer.Exit(exit_code(model))
