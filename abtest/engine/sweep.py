"""The sweep: arms x sizes x blocks on one or more nodes, crash-safe, always restoring.

Per node: pre-flight, then for each visit of the block schedule the node is configured
once (verified in effect by the node layer), an optional warm-up round runs, then every
size in the visit's random order. Every finished round is committed before the next
starts, so `--resume` continues exactly where a run stopped. Whatever happens (error,
Ctrl-C, SIGTERM) the node's original config is put back and verified before we return.

Several nodes run the same schedule concurrently, one thread each; a node is then a block
factor in the analysis. One node is the N=1 case of the same code. SIGINT/SIGTERM are caught
on the main thread (:mod:`abtest.process.stop`) and reach every worker at its next wait, so each
one stops promptly, restores its own node under a shield and releases its lock; the run is
recorded "interrupted" and the signal propagates (the CLI exits 128 + signum).

One node's share is :mod:`abtest.engine.node_sweep`; the run's rows and the resume check are
:mod:`abtest.engine.sweep_run`. Everything that talks to a node or the API server comes from a
:class:`~abtest.engine.sweep_nodes.NodeKit` (the real one by default).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from abtest.batch.run_record import finish_run
from abtest.engine.fleet import check_fleet, skipped_arms
from abtest.engine.node_sweep import NodeOutcome, NodeSweep, PreflightBarrier, SweepStopped
from abtest.engine.sweep_nodes import NodeKit, RealNodes
from abtest.engine.sweep_plan import SweepPlan
from abtest.engine.sweep_run import Event, SweepOptions, start_run
from abtest.errors import AbtestError, Interrupted, StoreError
from abtest.process.stop import SignalGuard, shield
from abtest.store.db import Store

__all__ = ["Event", "SweepOptions", "SweepResult", "run_sweep"]


@dataclass
class SweepResult:
    run_id: str
    status: str
    nodes: list[NodeOutcome]
    wall_s: float


def run_sweep(
    plan: SweepPlan,
    store: Store,
    opts: SweepOptions,
    emit: Event,
    resume_run_id: str | None = None,
    upto_block: int | None = None,
    kit: NodeKit | None = None,
) -> SweepResult:
    """Run (or resume) the sweep on every node of the plan; always restores the nodes.

    SIGINT/SIGTERM are handled for the whole call, on the main thread: the workers stop and
    restore, the run is recorded "interrupted", and :class:`Interrupted` propagates.
    """
    kit = kit or RealNodes()
    with SignalGuard():
        return _sweep(plan, store, opts, emit, resume_run_id, upto_block, kit)


def _sweep(
    plan: SweepPlan,
    store: Store,
    opts: SweepOptions,
    emit: Event,
    resume_run_id: str | None,
    upto_block: int | None,
    kit: NodeKit,
) -> SweepResult:
    t0 = time.monotonic()
    check_fleet(plan.profiles, kit)  # read only: refuses before any node is touched
    if resume_run_id:
        run_id = resume_run_id
        store.runs.reopen(run_id)
    else:
        run_id = start_run(store, plan, opts, kit)
    emit("run", {"run_id": run_id, "resumed": bool(resume_run_id)})
    stop = threading.Event()
    workers = [NodeSweep(plan, p, store, run_id, opts, emit, stop, kit) for p in plan.profiles]
    barrier = PreflightBarrier(len(workers)) if len(workers) > 1 else None
    for w in workers:
        w.upto_block = upto_block
        w.barrier = barrier
    status, reason = "finished", None
    try:
        if len(workers) == 1:
            workers[0].run()
        else:
            _run_concurrently(workers, stop)
    except Interrupted as exc:
        status, reason = "interrupted", str(exc)
        raise
    except AbtestError as exc:  # UserError is one too
        status, reason = "failed", str(exc)
        raise
    except BaseException as exc:
        status, reason = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        with shield():  # the run row is written even if a second signal comes now
            if status == "finished" and any(w.outcome.failed_arms for w in workers):
                reason = skipped_arms({w.outcome.node_name: w.outcome.failed_arms for w in workers})
            try:
                finish_run(store, run_id, status, reason)
            except StoreError:
                if status == "finished":
                    raise
                # the store failed again: the error that stopped the run is the one to say;
                # the row stays open and --resume reopens it
            emit("end", {"run_id": run_id, "status": status, "reason": reason})
    return SweepResult(run_id, status, [w.outcome for w in workers], time.monotonic() - t0)


def _run_concurrently(workers: list[NodeSweep], stop: threading.Event) -> None:
    """Each node in its own thread; the main thread waits for every one of them.

    The first failure sets ``stop`` (the others stop at their next round boundary and
    restore). A signal lands here, on the main thread, which is shielded while it waits: the
    signal is not raised here but reaches every worker at its next wait (abtest.process.stop),
    each restores its node, and only when all are done is the interruption raised.
    """
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        futures = [pool.submit(w.run) for w in workers]
        with shield():
            pending: set[Future[NodeOutcome]] = set(futures)
            while pending:
                # a timeout, so the main thread runs its signal handler between waits
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
                if any(f.exception() is not None for f in done):
                    stop.set()
            errors = [e for f in futures if (e := f.exception()) is not None]
            interrupted = [e for e in errors if isinstance(e, Interrupted)]
            # the failure that stopped the others, not their "stopped because ..." answers
            own = [e for e in errors if not isinstance(e, SweepStopped)]
            if interrupted or errors:
                raise (interrupted or own or errors)[0]
