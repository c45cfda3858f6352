"""The regression gate measured live: reference and candidate node states as the two arms
of the sweep engine, in randomized blocks, looking at fixed block counts and adding blocks
while the verdict is INCONCLUSIVE (see ``regress.look_schedule`` and the Bonferroni spending
in ``abtest.stats.regress_decision``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from abtest.batch.round_records import RoundResult
from abtest.config.build_names import KubeletBinary, NodePath, parse_build_name
from abtest.config.domain import Arm, Catalog, Scalar
from abtest.config.plan_options import PlanOptions
from abtest.config.playbook import NodeProfile, Playbook, load_profile
from abtest.engine.fleet import same_node
from abtest.engine.regress_rounds import analysable_rounds, decide, look_schedule
from abtest.engine.schedule import build_schedule
from abtest.engine.sweep import SweepOptions, SweepResult, run_sweep
from abtest.engine.sweep_nodes import NodeKit
from abtest.engine.sweep_plan import (
    SweepPlan,
    check_builds_found,
    check_plan_size,
    check_pod_renders,
    profile_build,
)
from abtest.errors import AbtestError, UserError
from abtest.node.binary import check_path
from abtest.node.kubelet_config import parse_set_option
from abtest.stats import overall_verdict
from abtest.stats.regress_result import RegressResult
from abtest.store.db import Store


class CouldNotMeasure(AbtestError):
    """The gate could not produce a decision from real measurements (exit 4)."""

    exit_code = 4


def raise_if_arms_failed(result: SweepResult, name: Callable[[str, str], str]) -> None:
    """An arm that failed to apply (e.g. a candidate kubelet that will not start) was rolled
    back by the node layer and recorded as failed: no decision can come from this run.
    ``name(node, arm)`` says which arm, as the caller's user knows it."""
    failed = [
        f"{name(n.node_name, arm)}: {why.splitlines()[0] if why else 'no reason recorded'}"
        for n in result.nodes
        for arm, why in n.failed_arms.items()
    ]
    if failed:
        raise CouldNotMeasure(f"run {result.run_id}: could not apply {'; '.join(failed)}")


def round_outcome(result: RoundResult) -> str:
    """A finished round, as a live gate's or bisection's progress line ends: its batch-ready
    time (``-`` for none), and why it was rejected if it was."""
    ready = result.summary.batch_ready_s
    rejected = "" if result.accepted else f" REJECTED ({result.reason})"
    return f"{'-' if ready is None else f'{ready:.3f} s'}{rejected}"


@dataclass(frozen=True)
class NodeState:
    kubelet: KubeletBinary | None  # the binary=... given (None: the node's own)
    settings: tuple[tuple[str, Scalar], ...]

    @property
    def binary(self) -> str | None:
        """The binary as given back: a build's name or a file's path."""
        return None if self.kubelet is None else str(self.kubelet)


@dataclass(frozen=True)
class LiveRegressOptions:
    profile: str
    playbook: Playbook
    reference: str
    candidate: str
    sizes: tuple[int, ...]
    metrics: tuple[str, ...]
    margin_pct: float
    confidence: float
    rounds: int
    max_rounds: int
    seed: int
    accept_new_host_key: bool = False
    #: the profile already loaded (with --kubeconfig/--context applied); None loads `profile`
    node: NodeProfile | None = None
    #: several nodes (repeated --profile): every one runs the schedule, blocks from all of
    #: them make one verdict; () is `profile` alone. ``nodes``: the same, already loaded.
    profiles: tuple[str, ...] = ()
    nodes: tuple[NodeProfile, ...] = ()


def parse_spec(spec: str, flag: str) -> NodeState:
    """`default`, or comma-separated `binary=/path/on/node` (or `binary=vX.Y.Z` /
    `binary=vX.Y.Z+SERIES`, a build placed in the profile's kubelet.builds_dir) and
    `PATH=VALUE` settings."""
    if spec.strip() in ("", "default"):
        return NodeState(None, ())
    binary: KubeletBinary | None = None
    settings: list[tuple[str, Scalar]] = []
    for part in spec.split(","):
        item = part.strip()
        if not item:
            continue
        if item.startswith("binary="):
            # the build name or path whole, as every option takes one: only the spaces before
            # `binary=` are the list's, a newline or space after the name is refused with it
            value = part.lstrip().removeprefix("binary=")
            binary = (
                NodePath(check_path(value, flag))
                if value.startswith("/")
                else parse_build_name(value, f"{flag} binary=", paths=False)
            )
            continue
        try:
            settings.append(parse_set_option(item))
        except UserError as exc:
            raise UserError(exc.what, flag, "e.g. featureGates.X=true,kubeAPIQPS=5") from None
    return NodeState(binary, tuple(settings))


def build_regress_plan(opts: LiveRegressOptions, blocks: int) -> SweepPlan:
    ref, cand = parse_spec(opts.reference, "--reference"), parse_spec(opts.candidate, "--candidate")
    if (ref.kubelet, dict(ref.settings)) == (cand.kubelet, dict(cand.settings)):
        # Measuring one node state against itself is no gate (issue 11 item 11).
        raise UserError(
            "the candidate is the same node state as the reference",
            "--candidate",
            "give the candidate's binary=... and/or settings; --reference defaults to the node",
        )
    arms = (
        Arm("reference", frozenset(), ref.settings, ref.kubelet),
        Arm("candidate", frozenset(), cand.settings, cand.kubelet),
    )
    pb = opts.playbook
    names = opts.profiles or (opts.profile,)
    nodes = opts.nodes or (
        (opts.node,) if opts.node and len(names) == 1 else tuple(load_profile(n) for n in names)
    )
    same_node(nodes)
    # the profile's kubelet.build is the "node's kubelet" of an arm that names no binary
    build = profile_build(nodes)
    arms = (
        replace(arms[0], kubelet=arms[0].kubelet or build),
        replace(arms[1], kubelet=arms[1].kubelet or build),
    )
    for arm in arms:
        check_builds_found([arm], nodes, f"--{arm.name} binary=")
    check_plan_size(len(arms), len(opts.sizes), blocks, pb.source)
    check_pod_renders(pb, nodes)
    schedule = build_schedule(arms, opts.sizes, blocks, opts.seed, pb.warmup)
    catalog = Catalog("regress", "regress", "reference vs candidate", ())
    return SweepPlan(
        pb,
        catalog,
        (),
        "regress",
        arms,
        schedule,
        nodes,
        PlanOptions(
            playbook=pb.source,
            profiles=names,
            rounds=blocks,
            sizes=opts.sizes,
            seed=opts.seed,
        ),
    )


def run_live(
    opts: LiveRegressOptions, store: Store, say: Callable[[str], None], kit: NodeKit | None = None
) -> RegressResult:
    looks = look_schedule(opts.rounds, opts.max_rounds)
    plan = build_regress_plan(opts, looks[-1])
    sweep_opts = SweepOptions(kind="regress", accept_new_host_key=opts.accept_new_host_key)

    def emit(kind: str, data: dict[str, Any]) -> None:
        if kind == "round_done":
            s, r = data["slot"], data["result"]
            say(f"block {s.block + 1} {s.arm} {s.size} pods: {round_outcome(r)}")
        elif kind == "placement":
            say(data["msg"])
        elif kind in ("arm_failed", "end"):
            say(f"{kind}: {data.get('reason') or data.get('status')}")

    run_id: str | None = None
    for number, blocks in enumerate(looks, start=1):
        say(f"look {number}/{len(looks)}: measuring up to {blocks} blocks")
        result = run_sweep(
            plan, store, sweep_opts, emit, resume_run_id=run_id, upto_block=blocks, kit=kit
        )
        run_id = result.run_id
        raise_if_arms_failed(result, lambda node, arm: f"{arm} on {node}")
        rounds = analysable_rounds(store, run_id)
        short = _short_of_rounds(rounds, opts.sizes)
        if short:
            if number == len(looks):
                raise CouldNotMeasure(
                    f"run {run_id}: too few accepted rounds ({short}); rounds were rejected, "
                    "see `abtest report`"
                )
            continue  # rejected rounds: no decision at this look, more blocks come
        decisions = decide(
            rounds,
            reference="reference",
            candidate="candidate",
            sizes=list(opts.sizes),
            metrics=list(opts.metrics),
            margin_pct=opts.margin_pct,
            confidence=opts.confidence,
            look=number,
            max_looks=len(looks),
        )
        verdict = overall_verdict(decisions)
        if verdict != "INCONCLUSIVE" or number == len(looks):
            return RegressResult(
                decisions,
                verdict,
                number,
                len(looks),
                blocks,
                f"live run {run_id} on {', '.join(p.node_name for p in plan.profiles)}",
                run_id,
            )
    raise AssertionError("unreachable: the last look always returns")


def _short_of_rounds(rounds: Any, sizes: tuple[int, ...]) -> str:
    """Which (arm, size) have fewer than 2 accepted rounds ("" when none)."""
    short = []
    for size in sizes:
        for arm in ("reference", "candidate"):
            n = int(((rounds["arm"] == arm) & (rounds["size"] == size)).sum())
            if n < 2:
                short.append(f"{arm} at {size} pods: {n}")
    return ", ".join(short)
