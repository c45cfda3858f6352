"""Start-up benchmark (issues 15 and 43): not a test, figures for the record and a budget check.

Each command's wall time (median of ``--runs`` runs) against the bare interpreter (``python -c
pass``) measured in the same run, interleaved in a shuffled order so that the machine's noise
falls on every command alike: the excess over the bare interpreter in seconds, the ratio, and
which of the heavy packages (kubernetes, paramiko, aiohttp, matplotlib, pandas, scipy, pydantic)
the command imported; also the CPU seconds (user + system) over bare Python, which other work
on the machine inflates much less than the wall time. ``abtest`` is the console script next to
this interpreter (``.venv/bin/abtest``, what a user runs), else ``python -m abtest``; the
header says which.

By default the commands with a budget (issue 43): ``abtest --version`` and ``abtest gates
--list`` must start within ``--budget`` (0.3 s) of bare Python; the script exits 1 when either
median exceeds it. ``--all`` adds the other commands of issue 15 (no budget), run against a
throw-away results database with one synthetic sweep (2 arms x 2 sizes x 5 blocks) and a
rounds CSV made from it, so nothing here touches a node or the lab:

    .venv/bin/python benchmarks/startup.py [--runs 10] [--budget 0.3] [--all] [--json]

With ``PYTHONDONTWRITEBYTECODE`` set (and no ``__pycache__`` left from an earlier run) every run
compiles abtest's own modules from source; the header says so, as it is not what an installed
abtest does.

Figures, 2026-12-03 on a 2-core machine busy building the lab (load 8-17 throughout, so the
wall times are inflated; the CPU column is the steadier one), before -> after issue 43's
deferrals (pydantic in typer's coercion, the playbook parser in abtest.cli.options), the two
trees interleaved, 20 runs: ``gates --list`` +0.987 -> +0.640 s wall, +0.260 -> +0.150 s CPU;
``--version`` +0.201 -> +0.210 s wall, +0.057 -> +0.054 s CPU (it imported neither before).
This script at load 8: ``gates --list`` +0.494 -> +0.234 s, ``--version`` +0.105 -> +0.092 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HEAVY = ("kubernetes", "paramiko", "aiohttp", "matplotlib", "pandas", "scipy", "pydantic")
# The commands issue 43 gives a budget over bare Python (--budget).
BUDGETED = ("abtest --version", "abtest gates --list")
RUN_ID = "20261130-120000-bench"
Row = dict[str, Any]


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


def commands(abtest: list[str], folder: Path | None) -> dict[str, list[str]]:
    """The budgeted commands; with a fixture folder (--all) the others of issue 15 too."""
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "abtest --version": [*abtest, "--version"],
        "abtest gates --list": [*abtest, "gates", "--list"],
    }
    if folder is None:
        return cmds
    csv_path, out = folder / "rounds.csv", folder / "report"
    return {
        **cmds,
        "abtest --help": [*abtest, "--help"],
        "abtest plan": [*abtest, "plan", "--playbook", "lab-sweep"],
        "abtest runs": [*abtest, "runs"],
        "abtest analyze CSV": [*abtest, "analyze", str(csv_path)],
        "abtest report -f json": [*abtest, "report", RUN_ID, "-f", "json", "-o", str(out)],
        "abtest report": [*abtest, "report", RUN_ID, "-o", str(out)],
    }


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of the command."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed, cpu


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


def bytecode_note() -> str:
    """Whether the runs load abtest's modules from cached bytecode or compile them each time."""
    import abtest

    cached = any(Path(abtest.__file__).parent.glob("__pycache__/*.pyc"))
    if cached or not (sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")):
        return "abtest's bytecode cached"
    return "PYTHONDONTWRITEBYTECODE and no __pycache__: abtest's modules compiled every run"


def measure(cmds: dict[str, list[str]], env: dict[str, str], cwd: Path, runs: int) -> list[Row]:
    times: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    order = list(cmds)
    for name in order:  # one warm-up each: page cache, .pyc files
        run_once(cmds[name], env, cwd)
    rng = random.Random(1)
    for _ in range(runs):
        rng.shuffle(order)
        for name in order:
            wall, cpu = run_once(cmds[name], env, cwd)
            times[name].append(wall)
            cpus[name].append(cpu)
    bare = statistics.median(times["python -c pass"])
    bare_cpu = statistics.median(cpus["python -c pass"])
    rows: list[Row] = []
    for name, argv in cmds.items():
        median = statistics.median(times[name])
        rows.append(
            {
                "command": name,
                "median_s": round(median, 3),
                "min_s": round(min(times[name]), 3),
                "ratio": round(median / bare, 2),
                "excess_s": round(median - bare, 3),
                # less sensitive than the wall time to other work on the machine
                "cpu_excess_s": round(statistics.median(cpus[name]) - bare_cpu, 3),
                "budget_s": None,
                # -X importtime needs the interpreter: the console script is a Python file.
                "heavy_imports": heavy_imports(argv, env, cwd),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="Runs of each command (median).")
    parser.add_argument(
        "--budget", type=float, default=0.3, help="Most seconds over bare Python (budgeted)."
    )
    parser.add_argument("--all", action="store_true", help="Also the unbudgeted commands.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    # The console script is what a user runs; `-m abtest` if it is not installed next to us.
    script = Path(sys.executable).with_name("abtest")
    abtest = [str(script)] if script.exists() else [sys.executable, "-m", "abtest"]
    with tempfile.TemporaryDirectory(prefix="abtest-startup-") as tmp:
        folder = Path(tmp)
        env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
        if args.all:
            db, _ = make_fixture(folder)
            env["ABTEST_DB"] = str(db)
        rows = measure(commands(abtest, folder if args.all else None), env, folder, args.runs)
    over = []
    for r in rows:
        if r["command"] in BUDGETED:
            r["budget_s"] = args.budget
            if r["excess_s"] > args.budget:
                over.append(f"{r['command']} is {r['excess_s']:.3f} s over bare Python")
    load = os.getloadavg()[0]
    how = f"the console script {abtest[0]}" if len(abtest) == 1 else "python -m abtest"
    if args.json:
        figures = {"runs": args.runs, "abtest": how, "load_1min": load, "commands": rows}
        print(json.dumps({**figures, "bytecode": bytecode_note(), "over_budget": over}, indent=2))
    else:
        print_rows(rows, f"{args.runs} runs each, shuffled; abtest = {how}; {bytecode_note()}")
        print(f"load average (1 min) at the end {load:.2f}")
        if load > (os.cpu_count() or 1):
            print(
                f"the machine is busy ({load:.1f} runnable on {os.cpu_count()} cores): the wall "
                "times are inflated, the cpu column (user + system over bare) much less"
            )
    if over:
        print(f"over the {args.budget} s budget: " + "; ".join(over), file=sys.stderr)
        sys.exit(1)


def print_rows(rows: list[Row], header: str) -> None:
    print(header)
    print(
        f"{'command':<24} {'median s':>9} {'min s':>7} {'x bare':>7} {'+ s':>7} {'budget':>7}"
        f" {'cpu + s':>8}  heavy imports"
    )
    for r in rows:
        budget = "-" if r["budget_s"] is None else f"{r['budget_s']:.3f}"
        print(
            f"{r['command']:<24} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {r['ratio']:>7.2f} "
            f"{r['excess_s']:>7.3f} {budget:>7} {r['cpu_excess_s']:>8.3f}  "
            f"{', '.join(r['heavy_imports']) or '-'}"
        )


if __name__ == "__main__":
    main()
