"""One node's share of a sweep: pre-flight, then each visit of the block schedule (configure
once, verified in effect; an optional warm-up round; every size in the visit's order), each
finished round committed before the next starts, and the node's original config restored and
verified whatever happens. Several nodes wait at a :class:`PreflightBarrier` until every node's
pre-flight has passed."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from abtest.batch.record import record_round
from abtest.batch.spec import RoundSpec
from abtest.batch.template import arm_workload
from abtest.cluster.client import Cluster
from abtest.config.build_names import BuildName
from abtest.config.domain import Arm, build_version_of
from abtest.config.playbook import NodeProfile
from abtest.engine.pod_arms import ArmRuntimeUnavailable, check_arm_runtime, round_verifier
from abtest.engine.schedule import RoundSlot, Visit, remaining
from abtest.engine.sweep_nodes import NodeAccess, NodeControl, NodeKit, PreflightSpec, RealNodes
from abtest.engine.sweep_plan import SweepPlan
from abtest.engine.sweep_run import Event, SweepOptions, done_keys, failed_arms
from abtest.errors import AbtestError, ApplyFailed, Interrupted, NodeError
from abtest.node.kubelet_build import KubeletBuild, arm_problems, build_path
from abtest.process.stop import checkpoint
from abtest.store.db import Store


class SweepStopped(AbtestError):
    """Another node's worker asked everyone to stop (multi-node runs)."""


@dataclass
class NodeOutcome:
    node_name: str
    status: str  # finished | interrupted | failed
    reason: str | None = None
    rounds: int = 0
    failed_arms: dict[str, str] = field(default_factory=dict)


class PreflightBarrier:
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
        self.barrier: PreflightBarrier | None = None  # several nodes: wait for every pre-flight
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
            {p for a in arms if (p := build_path(a.kubelet, self.profile)) is not None}
        )
        spec = PreflightSpec(
            profile=self.profile,
            settings={k: v for arm in own for k, v in arm.settings},
            binaries=tuple(binaries),
            image=self.plan.playbook.workload.image,
            namespace=self.plan.playbook.namespace,
            accept_new_host_key=self.opts.accept_new_host_key,
            pods=max(self.plan.schedule.sizes, default=0),
            builds=tuple(a.kubelet for a in arms if isinstance(a.kubelet, BuildName)),
            # what placing the arms' builds uploads (said by every command that sweeps)
            say=lambda m: self.emit("placement", {"node": self.profile.node_name, "msg": m}),
            # a playbook's own template may request something else: only the shipped one's
            requests={}
            if self.plan.playbook.workload.template
            else {
                "cpu": self.plan.playbook.workload.cpu_request,
                "memory": self.plan.playbook.workload.memory_request,
            },
        )
        problems = self.kit.preflight(cluster, spec, self.store)
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
        records = {}
        for arm in self.plan.arms:
            build = builds.get(build_path(arm.kubelet, self.profile))
            if build is not None and build.release is not None:
                self.expected_kubelet[arm.name] = build.version
            if build is not None and arm.kubelet is not None:
                records[arm.name] = build.record()
        if records and not problems:
            # the run names what each arm's build was made of (release, series, patches)
            self.store.runs.merge_env(
                self.run_id, "kubelet_builds", self.profile.node_name, records
            )
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
        # The arms an earlier session of this run failed (--resume), read before the barrier:
        # after it another node's fresh failures are in the same table, and a node that read
        # them would skip arms it can run (seen under load: node-a skipped node-b's failures)
        failed = failed_arms(self.store, self.run_id)
        if self.barrier is not None:
            self.barrier.arrive()
            while not self.barrier.open.wait(0.05):
                self._boundary()  # another node's pre-flight failed, or a signal: stop here
        self.kit.ensure_namespace(cluster, self.plan.playbook.namespace)
        done = done_keys(self.store, self.run_id, self.profile.node_name)
        # a resumed visit restarts the kubelet, so its warm-up (if any) runs again
        todo = remaining(self.plan.schedule, done)
        with (
            self.kit.controller(
                self.profile,
                self.store,
                accept_new_host_key=self.opts.accept_new_host_key,
                break_lock=self.opts.break_lock,
                progress=lambda m: self.emit("node", {"msg": m}),
                run_id=self.run_id,  # the journal names the run its changes are
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
        # the whole version: a patched build (v1.36.3+agc) differs from its release only in
        # its build metadata
        if build_version_of(got) != want:
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
                ctl.install_kubelet_binary(build_path(arm.kubelet, self.profile))
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
                    container_starts=lambda: session.container_starts(pb.namespace),
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
