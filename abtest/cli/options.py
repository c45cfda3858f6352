"""Every option more than one command takes, declared once: an ``Annotated`` alias per option
(one typer style), so a command spells, types and documents it the same way as the others.

A command takes ``db: o.Db = None``; the type in the alias is the one mypy checks."""

from __future__ import annotations

from typing import Annotated

import typer

from abtest.errors import UserError
from abtest.experiment.plan import PlanOptions

# Re-exported for the commands and tests that apply --kubeconfig/--context to a profile.
from abtest.experiment.profiles import with_kube

__all__ = ["with_kube"]

# --- results and output ----------------------------------------------------------------
Db = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Results database: a SQLite file, or a shared postgresql://USER@HOST/DB "
        "(default: $ABTEST_DB, else ~/.local/share/abtest/results.sqlite).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON on stdout).")]

# --- nodes ---------------------------------------------------------------------------------
Profile = Annotated[
    str, typer.Option("--profile", "-p", help="Node profile: a shipped name (lab) or a YAML path.")
]
Profiles = Annotated[
    list[str] | None,
    typer.Option(
        "--profile", help="Node profile (name or path); repeat for several nodes at once."
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
    int | None, typer.Option("--rounds", min=1, help="Blocks (each visits every arm once).")
]
Sizes = Annotated[
    str | None, typer.Option("--sizes", help="Batch sizes, comma-separated, e.g. 50,100,150.")
]
Seed = Annotated[int | None, typer.Option("--seed", help="Seed of the randomized block order.")]
Qps = Annotated[
    float | None, typer.Option("--qps", min=0.001, help="Target create requests per second.")
]
Concurrency = Annotated[
    int | None, typer.Option("--concurrency", min=1, help="At most this many creates in flight.")
]
Namespace = Annotated[
    str | None, typer.Option("--namespace", help="Namespace the tool owns for its pods.")
]


def parse_sizes(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise UserError(f"invalid sizes {text!r}", "--sizes", "e.g. --sizes 10,20") from None
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
    )
