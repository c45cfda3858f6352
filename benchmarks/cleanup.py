"""Benchmark of the cleanup between rounds on the lab (issue 15 section 2): figures, not a test.

Runs real rounds (``run_round`` with the node's sandbox count and stopped-sandbox removal, as a
sweep does) and reports, per size, the median cleanup time (last observation -> pods gone from
the API and the node's sandbox count back at its pre-round value) and its parts as the round
stored them (``RoundResult.gap_parts``). Targets: 20 pods <= 1.5 s median, 150 pods (10m CPU
requests) <= 8 s. Before this work: 3-4 s and 21.9 s. 2026-11-30 on the lab, same hour, the
code before -> after the parallel stops, the stop-races fix and the background events listing:
20 pods 3.55 -> 2.54 s median (5 rounds each); 150 pods 19.7 -> 20.6 s (3 rounds each: the
runtime, not the commands, is the limit there; 8 stop commands at once: 20.9 s, and 2.97 s
at 20 pods, so the default stays 4). The cleanup's own CPU bill (``MachineCpu``: /proc/stat,
the lab being on this machine), 2026-11-30 with the lab's cluster DNS set: 20 pods 2.60 s
median using 4.5 CPU-s, 85 % of the 2 cores (2.3 s at full use of both); 150 pods 19.2 s using
36.0 CPU-s, 94 % (18.0 s at full use). So both targets are below what the runtime's work
needs on 2 cores, whoever issues the commands: per sandbox the shim and runc (about 0.1
CPU-s to kill and delete two containers), three CNI DELs (about 18 ms each: the kubelet's
StopPodSandbox, ours, and the forced stop inside containerd 1.6's RemovePodSandbox), then the
kubelet's pod workers and its status manager's 403s. By default the round stops its own
sandboxes (``NodeSession.clean_round_sandboxes``); ``--kubelet-stops`` measures the previous
cleanup (the kubelet stops each pod after its 2 s minimum grace, abtest removes the stopped).

``--stop-at-once N`` sets how many ``sandbox_stop`` commands run at once
(``abtest.node.session.STOP_COMMANDS_AT_ONCE``). After the rounds, the kubelet's log is read
for its 403s on the rounds' deleted pods (its status manager GETs each force-deleted pod; the
node authorizer refuses, the pod being gone): per round, how many, and whether the last came
after the next round's first create (i.e. inside the next round's measured span).

The lab node has 2 CPUs allocatable, so 150 pods need a small request (``--cpu-request 10m``);
its kubelet allows 250 pods. Run under the lab lock:

    flock /tmp/abtest-lab.lock .venv/bin/python benchmarks/cleanup.py --sizes 20 --rounds 5
    flock /tmp/abtest-lab.lock .venv/bin/python benchmarks/cleanup.py --sizes 150 --rounds 3
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from abtest.batch.round import run_round
from abtest.batch.spec import RoundSpec
from abtest.cluster.client import connect
from abtest.cluster.namespaces import delete_namespace, ensure_namespace
from abtest.config.playbook import Generator, Workload, load_profile
from abtest.node import session as node_session
from abtest.node.session import NodeSession

NAMESPACE = "abtest-bench-cleanup"
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal ...; idle and iowait
# are the time no process ran
_IDLE_FIELDS = (3, 4)


class MachineCpu:
    """The lab runs on this machine, so /proc/stat counts every CPU-second its processes
    (API server, etcd, kubelet, containerd, shims, runc, CNI plugins) spend. Sampled in the
    background; :meth:`busy_between` interpolates the busy CPU-seconds of a wall window. Why:
    a cleanup whose window is already busy on every core cannot be made shorter by issuing
    commands differently, only by less work per sandbox."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.hz = os.sysconf("SC_CLK_TCK")
        self.cores = os.cpu_count() or 1
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._loop, name="bench-cpu", daemon=True)
        self._thread.start()

    def _busy_s(self) -> float:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return (sum(fields) - sum(fields[i] for i in _IDLE_FIELDS)) / self.hz

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._busy_s()))
            self._stop.wait(self._every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def busy_between(self, start: float, end: float) -> float | None:
        times = [t for t, _ in self.samples]
        if not times or start < times[0] or end > times[-1]:
            return None
        return self._at(times, end) - self._at(times, start)

    def _at(self, times: list[float], t: float) -> float:
        i = min(max(bisect.bisect_left(times, t), 1), len(times) - 1)
        (t0, b0), (t1, b1) = self.samples[i - 1], self.samples[i]
        return b0 + (b1 - b0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)


def one(cluster: Any, node: NodeSession, profile: Any, size: int, args: Any) -> dict[str, Any]:
    def clean(tag: str) -> int:
        return node.clean_round_sandboxes(NAMESPACE, tag)

    result = run_round(
        cluster,
        RoundSpec(
            node_name=profile.node_name,
            namespace=NAMESPACE,
            size=size,
            run_id="bench-cleanup",
            workload=Workload(cpu_request=args.cpu_request),
            generator=Generator(
                qps=1000.0, concurrency=150, timeout_s=300.0, observe_s=args.observe
            ),
            sandbox_count=node.sandbox_count,
            reap_sandboxes=lambda: node.remove_stopped_sandboxes(NAMESPACE),
            clean_sandboxes=None if args.kubelet_stops else clean,
            scrape_metrics=not args.no_metrics,
        ),
    )
    parts = {f"{g.phase}.{g.part}": g.seconds for g in result.gap_parts}
    return {
        "round": result.round_tag,
        "started_wall": result.started_wall,
        "returned_wall": time.time(),
        "pods": size,
        "accepted": result.accepted,
        "batch_ready_s": result.summary.batch_ready_s,
        "cleanup_s": result.cleanup_s,
        "cleanup_api_s": result.cleanup_api_s,
        "cleanup_ok": result.cleanup_ok,
        "sandbox_baseline": result.sandbox_baseline,
        "sandbox_after": result.sandbox_after,
        "parts": parts,
        "notes": result.notes,
        "cleanup": "kubelet-stops" if args.kubelet_stops else "stop-own",
    }


def _median(rows: list[dict[str, Any]], get: Any) -> float | None:
    vals = [v for r in rows if (v := get(r)) is not None]
    return statistics.median(vals) if vals else None


# klog: "E1130 19:05:33.483657 4361 status_manager.go:1018] "Failed to get status for pod"
# err="pods \"abt-<round>-0028\" is forbidden: ..."
_FORBIDDEN = re.compile(
    r"^[EW](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) .*Failed to get status for pod.*"
    r"forbidden.*pod=\"[^/]+/abt-([0-9a-f]+)-"
)


def kubelet_403s(log: str, rows: list[dict[str, Any]]) -> None:
    """Per round: the kubelet's 403s on its deleted pods (count, last one's wall time), and
    whether the last came after the next round's first create."""
    year = datetime.now(UTC).year
    last: dict[str, float] = {}
    count: dict[str, int] = {}
    for line in log.splitlines():
        m = _FORBIDDEN.match(line)
        if not m:
            continue
        month, day, clock, tag = m.groups()
        at = datetime.strptime(f"{year}-{month}-{day} {clock}", "%Y-%m-%d %H:%M:%S.%f")
        wall = at.replace(tzinfo=UTC).timestamp()
        count[tag] = count.get(tag, 0) + 1
        last[tag] = max(last.get(tag, 0.0), wall)
    for i, row in enumerate(rows):
        tag = row["round"]
        nxt = rows[i + 1]["started_wall"] if i + 1 < len(rows) else None
        row["kubelet_403s"] = count.get(tag, 0)
        row["last_403_after_return_s"] = last[tag] - row["returned_wall"] if tag in last else None
        row["last_403_in_next_round"] = None if nxt is None or tag not in last else last[tag] > nxt


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--profile", default="lab")
    ap.add_argument("--sizes", default="20")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--observe", type=float, default=1.0)
    ap.add_argument("--cpu-request", default="10m")
    ap.add_argument("--no-metrics", action="store_true", help="skip the kubelet metric scrapes")
    ap.add_argument(
        "--kubelet-stops",
        action="store_true",
        help="the previous cleanup: wait for the kubelet to stop the sandboxes (2 s grace), "
        "then remove the stopped ones",
    )
    ap.add_argument(
        "--stop-at-once",
        type=int,
        default=node_session.STOP_COMMANDS_AT_ONCE,
        help="how many sandbox_stop commands run at once",
    )
    ap.add_argument("--log-lines", type=int, default=50000, help="kubelet log lines to read")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    node_session.STOP_COMMANDS_AT_ONCE = args.stop_at_once
    profile = load_profile(args.profile)
    cluster = connect(profile.kubeconfig, pool_size=158)
    ensure_namespace(cluster, NAMESPACE)
    rows: list[dict[str, Any]] = []
    cpu = MachineCpu()
    try:
        with NodeSession(profile) as node:
            for size in (int(s) for s in args.sizes.split(",")):
                for _ in range(args.rounds):
                    row = one(cluster, node, profile, size, args)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
            time.sleep(0.5)  # one more CPU sample after the last cleanup
            kubelet_403s(node.kubelet_log_tail(args.log_lines), rows)
    finally:
        cpu.stop()
        delete_namespace(cluster, NAMESPACE)
    for row in rows:
        # the cleanup is the last thing run_round does: its window ends as the round returns
        end = row["returned_wall"]
        busy = cpu.busy_between(end - row["cleanup_s"], end)
        row["cleanup_cpu_s"] = busy
        row["cleanup_busy_share"] = None if busy is None else busy / (cpu.cores * row["cleanup_s"])
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for size in sorted({r["pods"] for r in rows}):
        mine = [r for r in rows if r["pods"] == size]
        cleanup = _median(mine, lambda r: r["cleanup_s"])
        each = ", ".join(f"{r['cleanup_s']:.2f}" for r in mine)
        print(
            f"{size} pods, {len(mine)} rounds (stop commands at once: {args.stop_at_once}): "
            f"cleanup median {cleanup:.3f} s (all: {each}); "
            f"all clean: {all(r['cleanup_ok'] for r in mine)}"
        )
        cpu_s = _median(mine, lambda r: r["cleanup_cpu_s"])
        share = _median(mine, lambda r: r["cleanup_busy_share"])
        if cpu_s is not None and share is not None:
            print(
                f"  machine CPU during the cleanup: median {cpu_s:.1f} CPU-s, {share:.0%} of "
                f"its {cpu.cores} cores; at full use of every core the same work needs "
                f"{cpu_s / cpu.cores:.1f} s"
            )
        late = [r["last_403_after_return_s"] for r in mine]
        print(
            f"  kubelet 403s on deleted pods per round: {[r['kubelet_403s'] for r in mine]}; "
            "last one after the round returned (s): "
            f"{[None if x is None else round(x, 1) for x in late]}; "
            f"inside the next round: {[r['last_403_in_next_round'] for r in mine]}"
        )
        names = sorted({k for r in mine for k in r["parts"]})
        for name in names:
            med = _median(mine, lambda r, n=name: r["parts"].get(n))
            print(f"  {name:<28} median {med:.3f} s")


if __name__ == "__main__":
    main()
