"""Sweep wall time against what the method itself needs (issue 15 section 2): figures, not a test.

Runs a short lab sweep through the CLI as a user would (fresh results database), then reads it
back: the method's own time is the sum over rounds of batch ready time + observation window;
the ratio is the sweep's wall time (run created -> finished, and the whole process) over it.
The rest is broken down from what the sweep stored: the gaps before and after each round (by
part, ``round_gaps``), the kubelet restarts of each visit (restart -> verified healthy) and
what is left (pre-flight, applying the config before the restart, the final restore).
Target: at most 1.15; before this work 1.29 (1.44 under load). 2026-11-30 on the lab with the
round's events listed while the node is cleaned (``--rounds 2 --sizes 10``, 10 rounds in the
"abtest" namespace holding 23k earlier events): 1.227 and 1.244 (the code before, same hour:
1.301, its events listing 12.9 s over 10 rounds); events_wait 0.00 s over 10 rounds,
node_clean 18.9 s of the 22.4 s of gaps after rounds. Later the same day, the lab with its
cluster DNS set: 1.200 (process 1.217): gaps after rounds 17.0 s (node_clean 14.6 s, the
runtime's CPU-bound work: ``benchmarks/cleanup.py``), kubelet restarts 7.2 s, the rest 8.5 s.
Run under the lab lock:

    flock /tmp/abtest-lab.lock .venv/bin/python benchmarks/sweep_ratio.py --rounds 2 --sizes 10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from abtest.config.playbook import load_playbook
from abtest.store.db import Store


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def breakdown(store: Store, run_id: str, observe_s: float) -> dict[str, Any]:
    run = store.run_row(run_id)
    wall = _t(run["finished_at"]) - _t(run["created_at"])
    rounds = store.rounds_frame(run_id)
    method = float((rounds["batch_ready_s"].fillna(0) + observe_s).sum())
    before = float(rounds["gap_before_s"].fillna(0).sum())
    after = float(rounds["gap_after_s"].fillna(0).sum())
    visits = store.visits_frame(run_id)
    restarts = float(visits["restart_to_verified_s"].fillna(0).sum())
    parts = store.query(
        "SELECT g.phase, g.part, SUM(g.seconds) AS s, COUNT(*) AS n FROM round_gaps g "
        "JOIN rounds r ON r.id = g.round_id WHERE r.run_id = ? AND g.summed = 1 "
        "GROUP BY g.phase, g.part ORDER BY s DESC",
        (run_id,),
    )
    return {
        "run_id": run_id,
        "rounds": len(rounds),
        "visits": len(visits),
        "wall_s": wall,
        "method_s": method,
        "ratio": wall / method if method else None,
        "gaps_before_s": before,
        "gaps_after_s": after,
        "restarts_s": restarts,
        "rest_s": wall - method - before - after - restarts,
        "parts": {f"{p['phase']}.{p['part']}": (p["s"], p["n"]) for p in parts},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--playbook", default="lab-sweep")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sizes", default="10")
    ap.add_argument("--db", help="keep the results database here (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--existing", help="only break down this run id of --db (no new sweep)")
    args = ap.parse_args()
    if args.existing:
        with Store(args.db) as store:
            observe_s = load_playbook(args.playbook).generator.observe_s
            print(json.dumps(breakdown(store, args.existing, observe_s), indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "results.sqlite"
        id_file = Path(tmp) / "run-id"
        abtest = str(Path(sys.executable).with_name("abtest"))
        cmd = [
            abtest, "gates", "--all", "--playbook", args.playbook, "--rounds", str(args.rounds),
            "--sizes", args.sizes, "--db", str(db), "--run-id-file", str(id_file),
        ]  # fmt: skip
        t = time.monotonic()
        proc = subprocess.run(cmd, env=os.environ | {"ABTEST_DB": str(db)}, check=False)
        process_s = time.monotonic() - t
        if proc.returncode != 0:
            sys.exit(f"the sweep failed (exit {proc.returncode})")
        with Store(db) as store:
            observe_s = load_playbook(args.playbook).generator.observe_s
            out = breakdown(store, id_file.read_text().strip(), observe_s)
    out["process_s"] = process_s
    out["process_ratio"] = process_s / out["method_s"] if out["method_s"] else None
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['rounds']} rounds in {out['visits']} visits: wall {out['wall_s']:.1f} s "
        f"(process {process_s:.1f} s), method {out['method_s']:.1f} s -> ratio "
        f"{out['ratio']:.3f} (process {out['process_ratio']:.3f})"
    )
    for key in ("gaps_before_s", "gaps_after_s", "restarts_s", "rest_s"):
        print(f"  {key:<16} {out[key]:8.2f} s")
    for name, (seconds, n) in out["parts"].items():
        print(f"    {name:<28} {seconds:8.2f} s over {n} rounds")


if __name__ == "__main__":
    main()
