"""SIGTERM to a real fleet sweep once every node has measured a round (the lab tests of a
fleet's restore on a signal share it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from abtest.store.db import Store

REPO = Path(__file__).resolve().parents[1]


def sigterm_once_every_node_measured(
    args: list[str], db: Path, run_id_file: Path, log: Path, *, nodes: int = 2,
    deadline_s: float = 300,
) -> tuple[int, str]:  # fmt: skip
    """Run ``abtest ARGS`` (its run id written to ``run_id_file``), send SIGTERM when rounds
    of ``nodes`` nodes are in ``db`` (each node is into its next visit), and return the exit
    code and the output. A sweep that ends or stalls before that fails the test."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "abtest", *args],
            env={**os.environ, "NO_COLOR": "1", "ABTEST_DB": str(db)},
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + deadline_s
        while True:
            assert proc.poll() is None, f"ended early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"too slow:\n{log.read_text()[-3000:]}"
            if run_id_file.exists():
                with Store(db) as store:
                    measured = store.query("SELECT DISTINCT node_name FROM rounds")
                if len(measured) == nodes:
                    break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, log.read_text()
