"""`abtest batch`: one round of the reference method on the node as it is, stored and shown."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from abtest.batch.model import RoundResult
from abtest.cli import options as o
from abtest.cli.render import console, err_console, print_json, print_table
from abtest.experiment.single_batch import run_single_batch
from abtest.playbook import Generator, Workload, load_playbook, load_profile
from abtest.store.db import Store


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def as_json(run_id: str, round_id: int, r: RoundResult) -> dict[str, Any]:
    s = r.summary
    return {
        "run_id": run_id,
        "round_id": round_id,
        "node": r.node_name,
        "namespace": r.namespace,
        "pods": r.size,
        "pods_ready": s.pods_ready,
        "accepted": r.accepted,
        "reason": r.reason,
        "timed_out": r.timed_out,
        "batch_ready_s": s.batch_ready_s,
        "p50_s": s.p50_s,
        "p95_s": s.p95_s,
        "p99_s": s.p99_s,
        "mean_s": s.mean_s,
        "submit_rate": s.submit_rate,
        "sandbox_failures": r.sandbox_failures,
        "restarts": s.restarts,
        "ready_regressions": s.ready_regressions,
        "create_failures": s.create_failures,
        "create_retries": s.create_retries,
        "watch_restarts": r.watch_restarts,
        "watch_relisted": r.watch_relisted,
        "client_cpu_s": r.client_cpu_s,
        "cleanup_s": r.cleanup_s,
        "cleanup_api_s": r.cleanup_api_s,
        "cleanup_ok": r.cleanup_ok,
        "phases_median_s": s.phases,
        # Ready pods only, in pod-name order (a never-Ready pod has no latency)
        "pod_latencies_s": list(s.latencies_s),
        "notes": r.notes,
    }


def batch(
    profile: Annotated[
        str, typer.Option("--profile", help="Node profile: a shipped name (lab) or a YAML path.")
    ],
    pods: Annotated[int, typer.Option("--pods", min=1, help="Pods in the batch.")],
    qps: Annotated[
        float | None, typer.Option("--qps", min=0.001, help="Target creates/s (default 1000).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Max creates in flight (150).")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=1.0, help="Round timeout, s (300).")
    ] = None,
    observe: Annotated[
        float | None,
        typer.Option("--observe", min=0.0, help="Keep watching after the last Ready, s (10)."),
    ] = None,
    playbook: Annotated[
        str | None,
        typer.Option("--playbook", help="Take workload, generator and namespace from a playbook."),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Namespace abtest creates and owns (default abtest)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    db: Annotated[
        Path | None, typer.Option("--db", help="Results database (default: ABTEST_DB or XDG).")
    ] = None,
    kubeconfig: str | None = o.KUBECONFIG,
    context: str | None = o.CONTEXT,
) -> None:
    """Run one pod batch on the node as it is (no config change), store it, show it."""
    prof = o.with_kube(load_profile(profile), kubeconfig, context)
    book = load_playbook(playbook) if playbook else None
    workload: Workload = book.workload if book else Workload()
    gen: Generator = book.generator if book else Generator()
    given = {"qps": qps, "concurrency": concurrency, "timeout_s": timeout, "observe_s": observe}
    gen = replace(gen, **{k: v for k, v in given.items() if v is not None})  # type: ignore[arg-type]
    ns = namespace or (book.namespace if book else "abtest")

    def say(line: str) -> None:
        err_console.print(f"[dim]{line}[/]", highlight=False)

    with Store(db) as store:
        run_id, round_id, result = run_single_batch(
            store,
            prof,
            pods=pods,
            namespace=ns,
            workload=workload,
            generator=gen,
            playbook=book,
            say=say,
        )

    if json_out:
        print_json(as_json(run_id, round_id, result))
        return
    _print(run_id, result)


def _print(run_id: str, r: RoundResult) -> None:
    s = r.summary
    verdict = "[green]accepted[/]" if r.accepted else f"[red]not accepted[/]: {r.reason}"
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
        err_console.print(f"[yellow]note: {note}[/]", highlight=False)
