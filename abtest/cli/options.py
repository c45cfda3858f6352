"""Every option more than one command takes, declared once: an ``Annotated`` alias per option
(one typer style), so a command spells, types and documents it the same way as the others.

A command takes ``db: o.Db = None``; the type in the alias is the one mypy checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from abtest.config import numbers as num
from abtest.config.k8s_names import namespace_problem
from abtest.config.plan_options import PlanOptions
from abtest.errors import UserError

if TYPE_CHECKING:
    from abtest.config.playbook import NodeProfile

N = TypeVar("N", int, float)


def with_kube(profile: NodeProfile, kubeconfig: str | None, context: str | None) -> NodeProfile:
    """abtest.app.profiles.with_kube, for the commands and tests that apply --kubeconfig and
    --context to a profile. Imported when called: every command imports this module, and the
    playbook parser behind it is no part of `gates --list` or `--version`."""
    from abtest.app.profiles import with_kube as apply

    return apply(profile, kubeconfig, context)


def _flag(param: typer.CallbackParam) -> str:
    return max(param.opts, key=len) if param.opts else str(param.name)


def in_range(rng: num.Range) -> Callable[[typer.CallbackParam, N | None], N | None]:
    """A typer callback: the flag's value is finite and in ``rng`` (click's own FloatRange lets
    NaN through: every comparison with NaN is false). A UserError, so it is the one line every
    bad input gets (abtest.cli.main)."""

    def check(param: typer.CallbackParam, value: N | None) -> N | None:
        if value is not None and (problem := rng.problem(value)):
            raise UserError(problem, _flag(param), "see --help for the allowed values")
        return value

    return check


# --- results and output ----------------------------------------------------------------
DB_FLAG = "--db"  # named in errors about the database a command was given
Db = Annotated[
    str | None,
    typer.Option(
        DB_FLAG,
        help="Results database: a SQLite file, or a shared postgresql://USER@HOST/DB "
        "(default: $ABTEST_DB, else ~/.local/share/abtest/results.sqlite). Other URL schemes "
        "and libpq KEY=VALUE strings are refused; a password is never shown.",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON on stdout).")]
Confidence = Annotated[
    float, typer.Option("--confidence", help="Two-sided interval level, e.g. 0.95.")
]

# --- nodes ---------------------------------------------------------------------------------
Profile = Annotated[
    str,
    typer.Option(
        "--profile",
        "-p",
        help="Node profile: a path to an existing YAML file is that file, otherwise a shipped "
        "name (lab, kubeadm-systemd).",
    ),
]
Profiles = Annotated[
    list[str] | None,
    typer.Option(
        "--profile",
        help="Node profile: a path to an existing YAML file is that file, otherwise a shipped "
        "name (lab, kubeadm-systemd); repeat for several nodes at once.",
    ),
]
AcceptNewHostKey = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-key", help="Trust and record the host key of a node seen first."
    ),
]
BreakLock = Annotated[bool, typer.Option("--break-lock", help="Take over a stale node lock.")]
Kubeconfig = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        help="kubeconfig file(s), ':'-separated as in KUBECONFIG; overrides the profile's.",
    ),
]
Context = Annotated[
    str | None,
    typer.Option("--context", help="kubeconfig context to use; overrides the profile's context:."),
]

# --- what a sweep (gates, plan) or a live gate (regress) runs ------------------------------
Playbook = Annotated[str, typer.Option("--playbook", help="Playbook name or path.")]
Catalog = Annotated[
    str | None, typer.Option("--catalog", help="agc, lab or a path (default: the playbook's).")
]
Design = Annotated[
    str | None,
    typer.Option(
        "--design",
        help="gates-all, attribution, factorial, screen, or baseline+singles+... parts.",
    ),
]
Attribution = Annotated[
    bool,
    typer.Option("--attribution", help="Also all-on-minus-one arms (per-gate attribution)."),
]
Rounds = Annotated[
    int | None,
    typer.Option(
        "--rounds", callback=in_range(num.ROUNDS), help="Blocks (each visits every arm once)."
    ),
]
Sizes = Annotated[
    str | None, typer.Option("--sizes", help="Batch sizes, comma-separated, e.g. 50,100,150.")
]
Margin = Annotated[
    float | None,
    typer.Option("--margin", help="Allowed slowdown in percent, 0 to 100; default: playbook's."),
]
Seed = Annotated[
    int | None,
    typer.Option("--seed", callback=in_range(num.SEED), help="Seed of the randomized block order."),
]
Qps = Annotated[
    float | None,
    typer.Option("--qps", callback=in_range(num.QPS), help="Target create requests per second."),
]
Concurrency = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        callback=in_range(num.CONCURRENCY),
        help="At most this many creates in flight.",
    ),
]


def check_namespace(param: typer.CallbackParam, value: str | None) -> str | None:
    if value is not None and (problem := namespace_problem(value)):
        raise UserError(problem, _flag(param), "e.g. --namespace abtest")
    return value


Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace", callback=check_namespace, help="Namespace the tool owns for its pods."
    ),
]


KubeletBuildOpt = Annotated[
    str | None,
    typer.Option(
        "--kubelet-build",
        metavar="BUILD",
        help="Run every arm on this kubelet build instead of the node's own binary: a release "
        "(v1.35.4) or a release and patch series (v1.36.3+agc) placed in the profile's "
        "kubelet.builds_dir (`abtest lab kubelets BUILD`). The series' gates are then switched "
        "by config like any gate; the swap is journaled and the node's own kubelet restored.",
    ),
]


def parse_sizes(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    shown = text if len(text) <= 40 else text[:37] + "..."
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise UserError(f"invalid sizes {shown!r}", "--sizes", "e.g. --sizes 10,20") from None
    if len(sizes) > num.MAX_SIZES:
        raise UserError(f"{len(sizes)} sizes, more than {num.MAX_SIZES}", "--sizes")
    for size in sizes:
        num.SIZE.check(size, "--sizes", "pods per batch, e.g. --sizes 10,20")
    return sizes or None


def plan_options(
    *,
    playbook: str,
    profile: list[str] | None,
    catalog: str | None,
    names: list[str] | None,
    design: str | None,
    attribution: bool,
    rounds: int | None,
    sizes: str | None,
    seed: int | None,
    qps: float | None,
    concurrency: int | None,
    namespace: str | None,
    kubelet_build: str | None = None,
) -> PlanOptions:
    """The plan the sweep options describe (gates and plan take the same ones)."""
    return PlanOptions(
        playbook=playbook,
        profiles=tuple(profile or ()),
        catalog=catalog,
        factors=tuple(names or ()),
        design=design,
        attribution=attribution,
        rounds=rounds,
        sizes=parse_sizes(sizes),
        seed=seed,
        qps=qps,
        concurrency=concurrency,
        namespace=namespace,
        kubelet_build=kubelet_build,
    )
