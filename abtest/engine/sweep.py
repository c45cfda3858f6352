"""The sweep: arms x sizes x blocks on one or more nodes, crash-safe, always restoring.

Per node: pre-flight, then for each visit of the block schedule the node is configured
once (verified in effect by the node layer), an optional warm-up round runs, then every
size in the visit's random order. Every finished round is committed before the next
starts, so `--resume` continues exactly where a run stopped. Whatever happens (error,
Ctrl-C, SIGTERM) the node's original config is put back and verified before we return.

Several nodes run the same schedule concurrently, one thread each; a node is then a block
factor in the analysis. One node is the N=1 case of the same code. SIGINT/SIGTERM are caught
on the main thread (:mod:`abtest.node.signals`) and reach every worker at its next wait, so each
one stops promptly, restores its own node under a shield and releases its lock; the run is
recorded "interrupted" and the signal propagates (the CLI exits 128 + signum).

Everything that talks to a node or the API server comes from a
:class:`~abtest.engine.nodekit.NodeKit` (the real one by default).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from abtest.batch.record import record_round
from abtest.batch.run_record import finish_run, new_run
from abtest.batch.spec import RoundSpec
from abtest.batch.template import arm_workload
from abtest.cluster.client import Cluster
from abtest.config.domain import Arm, release_of
from abtest.config.playbook import NodeProfile
from abtest.engine.fleet import check_fleet, skipped_arms
from abtest.engine.nodekit import NodeAccess, NodeControl, NodeKit, RealNodes
from abtest.engine.pod_arms import ArmRuntimeUnavailable, check_arm_runtime, round_verifier
from abtest.engine.schedule import RoundKey, RoundSlot, Visit, remaining
from abtest.engine.sweep_plan import SweepPlan
from abtest.errors import AbtestError, ApplyFailed, Interrupted, NodeError, UserError
from abtest.node.kubelet_build import KubeletBuild, arm_problems, build_path
from abtest.node.signals import SignalGuard, checkpoint, shield
from abtest.store.db import Store
from abtest.store.tables import ArmRow

Event = Callable[[str, dict[str, Any]], None]


class SweepStopped(AbtestError):
    """Another node's worker asked everyone to stop (multi-node runs)."""


@dataclass
class NodeOutcome:
    node_name: str
    status: str  # finished | interrupted | failed
    reason: str | None = None
    rounds: int = 0
    failed_arms: dict[str, str] = field(default_factory=dict)


@dataclass
class SweepResult:
    run_id: str
    status: str
    nodes: list[NodeOutcome]
    wall_s: float


@dataclass
class SweepOptions:
    fail_fast: bool = False
    accept_new_host_key: bool = False
    break_lock: bool = False
    command: str | None = None
    kind: str = "sweep"  # the run's kind: sweep, or regress for the regression gate


def done_keys(store: Store, run_id: str, node_name: str) -> set[RoundKey]:
    return store.rounds.done_keys(run_id, node_name)


def failed_arms(store: Store, run_id: str) -> dict[str, str]:
    return store.arms.failed(run_id)


def start_run(store: Store, plan: SweepPlan, opts: SweepOptions, kit: NodeKit) -> str:
    first = plan.profiles[0]
    env = {p.node_name: kit.environment(p) for p in plan.profiles}
    run_id = new_run(
        store,
        opts.kind,
        command=opts.command,
        profile=first,
        node_name=first.node_name,
        playbook=plan.playbook,
        env=env[first.node_name] | {"nodes": env},
        plan=plan.to_dict(),
    )
    store.runs.describe(
        run_id, catalog=plan.catalog.name, design=plan.design, seed=plan.schedule.seed
    )
    store.arms.add(
        run_id,
        (
            ArmRow(
                a.name,
                a.on,
                a.settings_dict()
                | a.pod_dict()
                | ({"kubelet.binary": a.kubelet_binary} if a.kubelet_binary else {}),
            )
            for a in plan.arms
        ),
    )
    return run_id


class PreflightGate:
    """Several nodes: no node is changed until every node's pre-flight has passed, so one node
    that cannot take part stops the sweep with every node untouched."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.passed = 0
        self.mutex = threading.Lock()
        self.open = threading.Event()

    def arrive(self) -> None:
        with self.mutex:
            self.passed += 1
            if self.passed >= self.nodes:
                self.open.set()


class NodeSweep:
    """One node's share of a sweep."""

    def __init__(
        self,
        plan: SweepPlan,
        profile: NodeProfile,
        store: Store,
        run_id: str,
        opts: SweepOptions,
        emit: Event,
        stop: threading.Event,
        kit: NodeKit | None = None,
    ) -> None:
        self.plan, self.profile, self.store, self.run_id = plan, profile, store, run_id
        self.opts, self.emit, self.stop = opts, emit, stop
        self.kit: NodeKit = kit or RealNodes()
        self.outcome = NodeOutcome(profile.node_name, "running")
        self.uses_binaries = any(a.kubelet_binary for a in plan.arms)
        self.upto_block: int | None = None  # run only blocks below this (regress looks)
        self.gate: PreflightGate | None = None  # several nodes: wait for every pre-flight
        # the kubelet part (Arm.kubelet_key) the node runs since our last apply; None: not
        # known (first visit, resume, after a failed apply that restored the original)
        self.kubelet_now: tuple[object, ...] | None = None
        # arms of a sweep with kubelet builds: the version each must report after its restart
        self.expected_kubelet: dict[str, str] = {}

    def preflight(self, cluster: Cluster) -> None:
        arms = self.plan.arms
        # the node's own kubelet is checked as it runs (/configz, the feature metric); every
        # other build of an arm is read from its binary (its version and --help), below
        own = [a for a in arms if a.kubelet_binary is None]
        binaries = sorted(
            {p for a in arms if (p := build_path(a.kubelet_binary, self.profile)) is not None}
        )
        problems = self.kit.preflight(
            self.profile,
            cluster,
            settings={k: v for arm in own for k, v in arm.settings},
            binaries=binaries,
            image=self.plan.playbook.workload.image,
            namespace=self.plan.playbook.namespace,
            store=self.store,
            accept_new_host_key=self.opts.accept_new_host_key,
        )
        if self.uses_binaries:
            problems += self._build_problems(cluster, binaries)
        if problems:
            raise NodeError(
                f"pre-flight failed on {self.profile.node_name}, nothing was changed: "
                + "; ".join(problems)
            )
        self.emit("preflight", {"node": self.profile.node_name, "ok": True})

    def _build_problems(self, cluster: Cluster, binaries: list[str]) -> list[str]:
        """Every arm's kubelet binary read from the node (version, known gates, skew); what
        each arm must report after its restart is kept for the check in ``_visit``."""
        own = self.profile.kubelet_binary_path
        read = self.kit.kubelet_builds(self.profile, [own, *binaries])
        builds: dict[str | None, KubeletBuild | None] = {p: read.get(p) for p in binaries}
        builds[None] = read.get(own)
        problems = arm_problems(
            self.plan.arms, self.profile, builds, self.kit.api_server_version(cluster)
        )
        for arm in self.plan.arms:
            build = builds.get(build_path(arm.kubelet_binary, self.profile))
            if build is not None and build.release is not None:
                self.expected_kubelet[arm.name] = build.release.version
        return problems

    def run(self) -> NodeOutcome:
        if threading.current_thread() is threading.main_thread():
            return self._run()
        # a worker thread: SQLite connections belong to the thread that opened them, so
        # each worker writes through its own connection to the same database
        shared, self.store = self.store, Store(self.store.location)
        try:
            return self._run()
        finally:
            self.store.close()
            self.store = shared

    def _run(self) -> NodeOutcome:
        gen = self.plan.playbook.generator
        cluster = self.kit.cluster(self.profile, pool_size=max(32, gen.concurrency + 8))
        self.preflight(cluster)
        if self.gate is not None:
            self.gate.arrive()
            while not self.gate.open.wait(0.05):
                self._boundary()  # another node's pre-flight failed, or a signal: stop here
        self.kit.ensure_namespace(cluster, self.plan.playbook.namespace)
        done = done_keys(self.store, self.run_id, self.profile.node_name)
        failed = failed_arms(self.store, self.run_id)
        # a resumed visit restarts the kubelet, so its warm-up (if any) runs again
        todo = remaining(self.plan.schedule, done)
        with (
            self.kit.controller(
                self.profile,
                self.store,
                accept_new_host_key=self.opts.accept_new_host_key,
                break_lock=self.opts.break_lock,
                progress=lambda m: self.emit("node", {"msg": m}),
            ) as ctl,
            self.kit.session(self.profile) as session,
        ):
            try:
                for visit in self.plan.schedule.visits:
                    if self.upto_block is not None and visit.block >= self.upto_block:
                        break
                    slots = [s for s in todo if s.visit_index == visit.index]
                    if not slots or visit.arm in failed:
                        continue
                    self._boundary()
                    self._visit(ctl, session, cluster, visit, slots, failed)
                self.outcome.status = "finished"
            except Interrupted as exc:
                self.outcome.status, self.outcome.reason = "interrupted", str(exc)
                raise
            except BaseException as exc:
                self.outcome.status, self.outcome.reason = "failed", f"{type(exc).__name__}: {exc}"
                fleet = len(self.plan.profiles) > 1
                if fleet and isinstance(exc, AbtestError) and not isinstance(exc, SweepStopped):
                    # several nodes: the run and the CLI must say which one failed
                    exc.args = (f"node {self.profile.node_name} failed: {exc}",)
                raise
            finally:
                with ctl.guard.shield():
                    if ctl.has_pending_change():
                        self.emit("restore", {"node": self.profile.node_name})
                        rec = ctl.restore()
                        self.emit(
                            "restored",
                            {
                                "node": self.profile.node_name,
                                "total_s": rec.total_s,
                            },
                        )
        self.outcome.failed_arms = failed
        return self.outcome

    def _check_kubelet_version(self, cluster: Cluster, arm: Arm) -> None:
        """After the restart: the node runs the arm's build (nodeInfo.kubeletVersion, which
        the kubelet posts with the heartbeat the health wait saw)."""
        want = self.expected_kubelet.get(arm.name)
        if want is None:
            return
        got = self.kit.kubelet_version(cluster, self.profile.node_name)
        if release_of(got) != release_of(want):
            raise ApplyFailed(
                f"arm {arm.name}: the node reports kubelet {got} after the restart, not its "
                f"build's {want}"
            )

    def _boundary(self) -> None:
        """Between visits and rounds: a signal, or another node's failure, stops us here."""
        checkpoint()
        if self.stop.is_set():
            raise SweepStopped("stopped because another node failed")

    def _visit(
        self,
        ctl: NodeControl,
        session: NodeAccess,
        cluster: Cluster,
        visit: Visit,
        slots: list[RoundSlot],
        failed: dict[str, str],
    ) -> None:
        arm: Arm = self.plan.schedule.arm(visit.arm)
        node = self.profile.node_name
        visit_id = self.store.visits.begin(
            self.run_id, node=node, block=visit.block, position=visit.position, arm=arm.name
        )
        self.emit("apply", {"node": node, "block": visit.block, "arm": arm.name})
        try:
            # a runtime arm whose RuntimeClass or handler is missing fails here, untouched
            runtime = check_arm_runtime(
                arm.name,
                arm.runtime_class,
                handler_of=lambda name: self.kit.runtime_class_handler(cluster, name),
                node=session,
                profile=self.profile,
            )
            if self.uses_binaries:
                ctl.install_kubelet_binary(build_path(arm.kubelet_binary, self.profile))
            # The kubelet restarts when the visit before ran other kubelet settings (so each
            # arm starts from a fresh kubelet); arms that differ only in their pod (runc vs
            # crun) share it, and apply only checks the settings are still in effect.
            # plan.kubelet_visits counts restarts by the same rule.
            restart = arm.kubelet_key != self.kubelet_now
            self.kubelet_now = None
            # With kubelet builds as arms the kubelet running now may be another arm's build
            # (v1.35 does not know a v1.36 gate): every arm's binary was read in the
            # pre-flight, and the restart's verification (/configz, the metric) still checks
            # each setting in effect, so the running kubelet is not asked beforehand.
            rec = ctl.apply(
                arm.settings_dict(), force_restart=restart, check_known=not self.uses_binaries
            )
            self._check_kubelet_version(cluster, arm)
            self.kubelet_now = arm.kubelet_key
        except (ApplyFailed, ArmRuntimeUnavailable) as exc:
            failed[arm.name] = str(exc)
            self.store.visits.failed(visit_id, str(exc))
            self.store.arms.fail(self.run_id, arm.name, str(exc))
            self.emit("arm_failed", {"node": node, "arm": arm.name, "reason": str(exc)})
            if self.opts.fail_fast:
                raise
            return
        self.store.visits.applied(
            visit_id,
            restart_to_healthz_s=rec.restart_to_healthz_s,
            restart_to_ready_s=rec.restart_to_ready_s,
            restart_to_verified_s=rec.restart_to_verified_s,
            verified=rec.verified,
            config_sha256=rec.config_sha256,
        )
        self.emit(
            "applied",
            {
                "node": node,
                "arm": arm.name,
                "restart_to_verified_s": rec.restart_to_verified_s,
            },
        )
        pb = self.plan.playbook
        workload = arm_workload(pb.workload, arm)  # the arm's pod part, rendered into its pods
        # a runtime arm's rounds prove each pod's runtime before their pods are deleted
        verify = (
            round_verifier(
                runtime,
                pods=lambda tag: self.kit.round_pods(cluster, pb.namespace, tag),
                handlers=lambda tag: session.round_handlers(pb.namespace, tag),
            )
            if runtime is not None
            else None
        )
        previous = None  # the round before, in this visit: the sweep's share of the gap
        for slot in slots:
            self._boundary()
            self.emit("round_start", {"node": node, "slot": slot})
            result = self.kit.run_round(
                cluster,
                RoundSpec(
                    node_name=node,
                    namespace=pb.namespace,
                    size=slot.size,
                    run_id=self.run_id,
                    workload=workload,
                    generator=pb.generator,
                    sandbox_count=session.sandbox_count,
                    reap_sandboxes=lambda: session.remove_stopped_sandboxes(pb.namespace),
                    clean_sandboxes=lambda tag: session.clean_round_sandboxes(pb.namespace, tag),
                    verify=verify,
                ),
            )
            record_round(
                self.store,
                self.run_id,
                result,
                arm=arm.name,
                ordinal=slot.ordinal,
                block=slot.block,
                visit_id=visit_id,
                warmup=slot.warmup,
                previous=previous,
            )
            previous = result
            self.outcome.rounds += 1
            self.emit("round_done", {"node": node, "slot": slot, "result": result})
        self.store.visits.finish(visit_id)


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
    gate = PreflightGate(len(workers)) if len(workers) > 1 else None
    for w in workers:
        w.upto_block = upto_block
        w.gate = gate
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
            finish_run(store, run_id, status, reason)
            emit("end", {"run_id": run_id, "status": status, "reason": reason})
    return SweepResult(run_id, status, [w.outcome for w in workers], time.monotonic() - t0)


def _run_concurrently(workers: list[NodeSweep], stop: threading.Event) -> None:
    """Each node in its own thread; the main thread waits for every one of them.

    The first failure sets ``stop`` (the others stop at their next round boundary and
    restore). A signal lands here, on the main thread, which is shielded while it waits: the
    signal is not raised here but reaches every worker at its next wait (abtest.node.signals),
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


def resume_plan_check(store: Store, run_id: str, plan: SweepPlan) -> None:
    """Refuse to resume a run under other conditions than it was started with: another
    kind of run, another schedule, or a playbook (workload, generator) edited since."""
    row = store.run_row(run_id)
    if row["kind"] != "sweep":
        raise UserError(f"run {run_id} is a {row['kind']} run, not a sweep", "--resume")
    stored_plan = json.loads(row["plan_json"] or "{}")
    now_plan = json.loads(json.dumps(plan.to_dict(), default=str))
    # the schedule holds each arm's kubelet settings; arm_pods what it renders into its pods
    # (a RuntimeClass, annotations), which an edited catalog can change under the same name
    if any(stored_plan.get(k, {}) != now_plan.get(k, {}) for k in ("schedule", "arm_pods")):
        raise UserError(
            f"run {run_id} was planned differently (playbook, seed, rounds, sizes, or arms:"
            " their kubelet settings or pod parts)",
            "--resume",
            "resume with the same flags and playbook as the original run",
        )
    text = plan.playbook.text
    now = hashlib.sha256(text.encode()).hexdigest() if text else None
    if row["playbook_sha256"] and now and row["playbook_sha256"] != now:
        raise UserError(
            f"playbook {plan.playbook.source} changed since run {run_id} started",
            "--resume",
            "put the playbook back as it was, or start a new run",
        )
