"""The option groups that sweep, plan, regress and bisect share
(:class:`abtest.cli.options.OptionGroup`, after asv's ``common_args.add_*``); the one analyze
and regress share, where their rounds come from, is :data:`abtest.cli.sources.OTHER_TOOLS`."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from abtest.app.reach import Reach
from abtest.cli import options as o
from abtest.cli.options import OptionGroup, option
from abtest.config.plan_options import PlanOptions

# --- what a sweep reads and how it schedules (gates, plan) ----------------------------------


@dataclass(frozen=True)
class SweepInputs:
    playbook: str
    profiles: tuple[str, ...]
    catalog: str | None


SWEEP_INPUTS = OptionGroup(
    (
        option("playbook", o.Playbook, "lab-sweep"),
        option("profile", o.Profiles, None),
        option("catalog", o.Catalog, None),
    ),
    lambda playbook, profile, catalog: SweepInputs(playbook, tuple(profile or ()), catalog),
)


@dataclass(frozen=True)
class SweepSchedule:
    """How the sweep is scheduled: each field is the PlanOptions field of its name."""

    rounds: int | None
    sizes: tuple[int, ...] | None
    seed: int | None
    qps: float | None
    concurrency: int | None
    namespace: str | None
    kubelet_build: str | None


SWEEP_SCHEDULE = OptionGroup(
    (
        option("rounds", o.Rounds, None),
        option("sizes", o.Sizes, None),
        option("seed", o.Seed, None),
        option("qps", o.Qps, None),
        option("concurrency", o.Concurrency, None),
        option("namespace", o.Namespace, None),
        option("kubelet_build", o.KubeletBuildOpt, None),
    ),
    lambda sizes, **rest: SweepSchedule(sizes=o.parse_sizes(sizes), **rest),
)


def plan_options(
    names: list[str] | None,
    design: str | None,
    attribution: bool,
    inputs: SweepInputs,
    schedule: SweepSchedule,
) -> PlanOptions:
    """The plan the sweep options describe (gates and plan take the same ones)."""
    return PlanOptions(
        playbook=inputs.playbook,
        profiles=inputs.profiles,
        catalog=inputs.catalog,
        factors=tuple(names or ()),
        design=design,
        attribution=attribution,
        **asdict(schedule),
    )


# --- how a live run reaches its node and stores what it measured (gates, regress, bisect) ---


@dataclass(frozen=True)
class LiveRun:
    accept_new_host_key: o.AcceptNewHostKey = False
    db: o.Db = None
    kubeconfig: o.Kubeconfig = None
    context: o.Context = None
    json_out: o.Json = False

    def reach(self) -> Reach:
        """What a live request (a sweep's, regress's, bisect's) takes of these: the node's host
        key, its kubeconfig and context, the database."""
        return Reach(self.accept_new_host_key, self.kubeconfig, self.context, self.db)


LIVE_RUN = OptionGroup.of(LiveRun)
