"""Start-up benchmark (issue 15 section 1): not a test, figures for the record.

Each command's wall time (median of ``--runs`` runs) as a ratio to the bare interpreter
(``python -c pass``) measured in the same run, interleaved in a shuffled order so that the
machine's noise falls on every command alike; also the excess over the bare interpreter in
seconds (the issue's target: ``--version`` and ``gates --list`` within 0.3 s) and which of the
heavy packages (kubernetes, paramiko, aiohttp, matplotlib, pandas, scipy) the command imported.

The commands run against a throw-away results database with one synthetic sweep (2 arms x 2
sizes x 5 blocks) and a rounds CSV made from it, so nothing here touches a node or the lab:

    .venv/bin/python benchmarks/startup.py [--runs 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HEAVY = ("kubernetes", "paramiko", "aiohttp", "matplotlib", "pandas", "scipy")
RUN_ID = "20261130-120000-bench"


def make_fixture(folder: Path) -> tuple[Path, Path]:
    """A results database with one finished sweep, and the same rounds as a CSV for analyze."""
    from abtest.store.db import Store

    rng = random.Random(7)
    db = folder / "results.sqlite"
    rows: list[tuple[str, int, int, float]] = []
    with Store(db) as store:
        store.insert(
            "runs",
            {
                "id": RUN_ID,
                "kind": "sweep",
                "created_at": "2026-11-30T12:00:00.000+00:00",
                "finished_at": "2026-11-30T12:30:00.000+00:00",
                "status": "finished",
                "node_name": "abtest-lab",
                "profile_name": "lab",
                "playbook_name": "lab-sweep",
                "design": "gates-all",
                "seed": 7,
                "command": "abtest gates --all --playbook lab-sweep",
                "plan_json": {"blocks": 5, "sizes": [10, 20]},
            },
        )
        for name, settings in (("baseline", {}), ("kubeAPIQPS", {"kubeAPIQPS": 50})):
            store.insert(
                "arms", {"run_id": RUN_ID, "name": name, "on_json": [], "settings_json": settings}
            )
        ordinal = 0
        for block in range(1, 6):
            for arm, scale in (("baseline", 1.0), ("kubeAPIQPS", 0.8)):
                for size in (10, 20):
                    ordinal += 1
                    ready = scale * size * 0.2 * rng.lognormvariate(0.0, 0.05)
                    rows.append((arm, size, block, ready))
                    store.insert(
                        "rounds",
                        {
                            "run_id": RUN_ID,
                            "node_name": "abtest-lab",
                            "block": block,
                            "arm": arm,
                            "size": size,
                            "ordinal": ordinal,
                            "started_wall": 1.79e9 + ordinal * 60,
                            "accepted": True,
                            "pods_ready": size,
                            "batch_ready_s": ready,
                            "p50_s": ready * 0.6,
                            "p95_s": ready * 0.95,
                            "p99_s": ready * 0.99,
                        },
                    )
    csv_path = folder / "rounds.csv"
    lines = ["arm,size,block,batch_ready_s"] + [f"{a},{s},{b},{r:.4f}" for a, s, b, r in rows]
    csv_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return db, csv_path


def commands(abtest: list[str], csv_path: Path, out: Path) -> dict[str, list[str]]:
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "abtest --version": [*abtest, "--version"],
        "abtest --help": [*abtest, "--help"],
        "abtest gates --list": [*abtest, "gates", "--list"],
        "abtest plan": [*abtest, "plan", "--playbook", "lab-sweep"],
        "abtest runs": [*abtest, "runs"],
        "abtest analyze CSV": [*abtest, "analyze", str(csv_path)],
        "abtest report -f json": [*abtest, "report", RUN_ID, "-f", "json", "-o", str(out)],
        "abtest report": [*abtest, "report", RUN_ID, "-o", str(out)],
    }


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def heavy_imports(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """Which heavy top-level packages the command imported (from ``-X importtime``)."""
    if argv[0] != sys.executable:
        argv = [sys.executable, "-X", "importtime", *argv]
    else:
        argv = [sys.executable, "-X", "importtime", *argv[1:]]
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    found = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            found.add(line.rsplit("|", 1)[1].strip())
    return [name for name in HEAVY if name in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="Runs of each command (median).")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    # The console script is what a user runs; `-m abtest` if it is not installed next to us.
    script = Path(sys.executable).with_name("abtest")
    abtest = [str(script)] if script.exists() else [sys.executable, "-m", "abtest"]
    with tempfile.TemporaryDirectory(prefix="abtest-startup-") as tmp:
        folder = Path(tmp)
        db, csv_path = make_fixture(folder)
        env = {**os.environ, "ABTEST_DB": str(db), "COLUMNS": "100", "NO_COLOR": "1"}
        cmds = commands(abtest, csv_path, folder / "report")
        if abtest[0] != sys.executable:
            # -X importtime needs the interpreter: the console script is a Python file.
            probe = {k: [sys.executable, *v] if v[0] == abtest[0] else v for k, v in cmds.items()}
        else:
            probe = cmds
        times: dict[str, list[float]] = {name: [] for name in cmds}
        order = list(cmds)
        for name in order:  # one warm-up each: page cache, .pyc files
            run_once(cmds[name], env, folder)
        rng = random.Random(1)
        for _ in range(args.runs):
            rng.shuffle(order)
            for name in order:
                times[name].append(run_once(cmds[name], env, folder))
        bare = statistics.median(times["python -c pass"])
        rows: list[dict[str, Any]] = []
        for name in cmds:
            median = statistics.median(times[name])
            rows.append(
                {
                    "command": name,
                    "median_s": round(median, 3),
                    "min_s": round(min(times[name]), 3),
                    "ratio": round(median / bare, 2),
                    "excess_s": round(median - bare, 3),
                    "heavy_imports": heavy_imports(probe[name], env, folder),
                }
            )
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"runs": args.runs, "load_1min": load, "commands": rows}, indent=2))
        return
    print(f"{args.runs} runs each, shuffled; load average (1 min) at the end {load:.2f}")
    print(f"{'command':<24} {'median s':>9} {'min s':>7} {'x bare':>7} {'+ s':>7}  heavy imports")
    for r in rows:
        print(
            f"{r['command']:<24} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {r['ratio']:>7.2f} "
            f"{r['excess_s']:>7.3f}  {', '.join(r['heavy_imports']) or '-'}"
        )


if __name__ == "__main__":
    main()
