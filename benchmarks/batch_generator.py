"""Benchmark of the batch generator on the lab (issue 5): not a test, figures for the record.

For each batch size: achieved submit rate, client CPU per create (the generator thread's own
CPU clock, and the whole process over the same span), create round-trip, and the lag between
a pod's server-side Ready transition and our watch seeing it.

The lag has to be estimated: the API server writes condition lastTransitionTime with one-second
resolution (truncated), so for each pod d = seen_wall - lastTransitionTime lies in
[lag, lag + 1). We report min(d) (an upper bound of the smallest lag), median(d) - 0.5 (the lag
if the sub-second part of the transition time is uniform), and confirm d >= 0 for every pod
(our clock never sees Ready before the server wrote it; same host, so no clock skew).
lastTransitionTime is the kubelet's clock when it computed the status, so that lag includes the
kubelet's status sync (its own API QPS limit); the "write" lag uses instead the managedFields
time of the status write that carried Ready=True (the API server's clock, also truncated to
seconds), which isolates API write -> watch delivery -> our thread.

The lab node has 2 CPUs allocatable, so the reference 100m request fits only 20 pods; the
benchmark requests 10m (``--cpu-request``) so 100 pods can be scheduled. Run under the lab lock:

    flock /tmp/abtest-lab.lock .venv/bin/python benchmarks/batch_generator.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from abtest.batch.round import run_round
from abtest.batch.spec import RoundSpec
from abtest.cluster.client import connect
from abtest.cluster.namespaces import delete_namespace, ensure_namespace
from abtest.config.playbook import Generator, Workload, load_profile
from abtest.node.session import NodeSession


def one(
    cluster: Any, node: NodeSession, profile: Any, ns: str, size: int, args: Any
) -> dict[str, Any]:
    result = run_round(
        cluster,
        RoundSpec(
            node_name=profile.node_name,
            namespace=ns,
            size=size,
            run_id="bench-generator",
            workload=Workload(cpu_request=args.cpu_request),
            generator=Generator(
                qps=args.qps, concurrency=args.concurrency, timeout_s=300.0, observe_s=args.observe
            ),
            sandbox_count=node.sandbox_count,
            scrape_metrics=False,
        ),
    )
    pods = result.pods
    sent = sorted(p.sent_s for p in pods if p.sent_s is not None)
    rtt = [
        p.response_s - p.sent_s for p in pods if p.response_s is not None and p.sent_s is not None
    ]
    lags = [
        result.started_wall + p.ready_s - p.server_ready
        for p in pods
        if p.ready_s is not None and p.server_ready is not None
    ]
    written = [
        result.started_wall + p.ready_s - p.server_ready_written
        for p in pods
        if p.ready_s is not None and p.server_ready_written is not None
    ]
    return {
        "pods": size,
        "accepted": result.accepted,
        "reason": result.reason,
        "submit_rate": result.summary.submit_rate,
        "send_rate": (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 else None,
        "create_rtt_median_ms": statistics.median(rtt) * 1000 if rtt else None,
        "client_cpu_ms_per_create": (result.client_cpu_s or 0) * 1000 / size,
        "process_cpu_ms_per_create": (result.process_cpu_s or 0) * 1000 / size,
        "ready_lag_min_d_s": min(lags) if lags else None,
        "ready_lag_est_s": statistics.median(lags) - 0.5 if lags else None,
        "ready_lag_all_nonnegative": all(d >= 0 for d in lags),
        "write_lag_min_d_s": min(written) if written else None,
        "write_lag_est_s": statistics.median(written) - 0.5 if written else None,
        "notes": result.notes,
        "batch_ready_s": result.summary.batch_ready_s,
        "p50_s": result.summary.p50_s,
        "p99_s": result.summary.p99_s,
        "watch_restarts": result.watch_restarts,
        "cleanup_s": result.cleanup_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="lab")
    ap.add_argument("--sizes", default="30,60,100")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--qps", type=float, default=1000.0)
    ap.add_argument("--concurrency", type=int, default=150)
    ap.add_argument("--observe", type=float, default=2.0)
    ap.add_argument("--cpu-request", default="10m")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    profile = load_profile(args.profile)
    cluster = connect(profile.kubeconfig, pool_size=args.concurrency + 8)
    ns = "abtest-bench"
    ensure_namespace(cluster, ns)
    rows = []
    try:
        with NodeSession(profile) as node:
            for size in (int(s) for s in args.sizes.split(",")):
                for _ in range(args.rounds):
                    row = one(cluster, node, profile, ns, size, args)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        delete_namespace(cluster, ns)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    head = ("pods", "submit/s", "send/s", "rtt ms", "cpu ms/create", "proc ms/create",
            "lag min d s", "lag est s", "write-lag min d s", "write-lag est s", "batch s",
            "P50 s", "P99 s", "ok")  # fmt: skip
    print(" | ".join(head))
    for r in rows:

        def f(v: Any, d: int = 3) -> str:
            return "-" if v is None else f"{v:.{d}f}"

        print(" | ".join([
            str(r["pods"]), f(r["submit_rate"], 0), f(r["send_rate"], 0),
            f(r["create_rtt_median_ms"], 1), f(r["client_cpu_ms_per_create"], 3),
            f(r["process_cpu_ms_per_create"], 3), f(r["ready_lag_min_d_s"]),
            f(r["ready_lag_est_s"]), f(r["write_lag_min_d_s"]), f(r["write_lag_est_s"]),
            f(r["batch_ready_s"]), f(r["p50_s"]), f(r["p99_s"]),
            str(r["accepted"]),
        ]))  # fmt: skip


if __name__ == "__main__":
    main()
