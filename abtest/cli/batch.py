"""`abtest batch`: one round of the reference method on the node as it is, stored and shown."""

from __future__ import annotations

from typing import Annotated

import typer

from abtest.app.batch import BatchRequest, single_batch
from abtest.batch.round_records import RoundResult
from abtest.cli import options as o
from abtest.cli.render import console, err_console, print_json, print_table, styled
from abtest.config import numbers as num
from abtest.config.playbook import load_profile


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def batch(
    profile: o.Profile,
    pods: Annotated[int, o.ranged("--pods", num.SIZE, "Pods in the batch.")],
    qps: Annotated[
        float | None, o.ranged("--qps", num.QPS, "Target creates/s (default 1000).")
    ] = None,
    concurrency: Annotated[
        int | None, o.ranged("--concurrency", num.CONCURRENCY, "Max creates in flight (150).")
    ] = None,
    timeout: Annotated[
        float | None, o.ranged("--timeout", num.TIMEOUT_S, "Round timeout, s (300).")
    ] = None,
    observe: Annotated[
        float | None,
        o.ranged("--observe", num.OBSERVE_S, "Keep watching after the last Ready, s (10)."),
    ] = None,
    playbook: Annotated[
        str | None,
        typer.Option("--playbook", help="Take workload, generator and namespace from a playbook."),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            callback=o.check_namespace,
            help="Namespace abtest creates and owns (default abtest).",
        ),
    ] = None,
    json_out: o.Json = False,
    db: o.Db = None,
    kubeconfig: o.Kubeconfig = None,
    context: o.Context = None,
) -> None:
    """Run one pod batch on the node as it is (no config change), store it, show it."""
    request = BatchRequest(
        profile=o.with_kube(load_profile(profile), kubeconfig, context),
        pods=pods,
        playbook=playbook,
        namespace=namespace,
        qps=qps,
        concurrency=concurrency,
        timeout_s=timeout,
        observe_s=observe,
        db=db,
    )
    done = single_batch(
        request, say=lambda line: err_console.print(line, style="dim", highlight=False)
    )
    if json_out:
        print_json(done.to_dict())
        return
    _print(done.run_id, done.result)


def _print(run_id: str, r: RoundResult) -> None:
    s = r.summary
    verdict = (
        styled(("accepted", "green"))
        if r.accepted
        else styled(("not accepted", "red"), f": {r.reason}")
    )
    print_table(
        f"run {run_id}: {r.size} pods on {r.node_name}",
        ["metric", "value"],
        [
            ("pods Ready", f"{s.pods_ready}/{r.size}"),
            ("batch ready s", _fmt(s.batch_ready_s)),
            ("P50 / P95 / P99 s", f"{_fmt(s.p50_s)} / {_fmt(s.p95_s)} / {_fmt(s.p99_s)}"),
            ("mean s", _fmt(s.mean_s)),
            ("submit rate /s", _fmt(s.submit_rate, 1)),
            ("restarts / Ready regressions", f"{s.restarts} / {s.ready_regressions}"),
            ("FailedCreatePodSandBox events", r.sandbox_failures),
            ("create failures / retries", f"{s.create_failures} / {s.create_retries}"),
            ("watch restarts / re-lists", f"{r.watch_restarts} / {r.watch_relisted}"),
            ("client CPU ms per create", _fmt((r.client_cpu_s or 0) * 1000 / r.size, 2)),
            ("cleanup s", _fmt(r.cleanup_s, 1) + ("" if r.cleanup_ok else " (incomplete)")),
            *((f"phase {k} (median s)", _fmt(v)) for k, v in s.phases.items()),
        ],
    )
    console.print(verdict, highlight=False)
    for note in r.notes:
        err_console.print(f"note: {note}", style="yellow", highlight=False)
