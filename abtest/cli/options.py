"""Options shared by the commands that plan or run a sweep (gates, plan, regress), and the
kubeconfig/context options of every command that talks to the API server."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from abtest.experiment.plan import PlanOptions
from abtest.playbook import NodeProfile

PLAYBOOK = typer.Option("lab-sweep", "--playbook", help="Playbook name or path.")
PROFILE = typer.Option(
    None, "--profile", help="Node profile (name or path); repeat for several nodes."
)
CATALOG = typer.Option(None, "--catalog", help="agc, lab or a path (default: the playbook's).")
ROUNDS = typer.Option(None, "--rounds", min=1, help="Blocks (each visits every arm once).")
SIZES = typer.Option(None, "--sizes", help="Batch sizes, comma-separated, e.g. 50,100,150.")
SEED = typer.Option(None, "--seed", help="Seed of the randomized block order.")
QPS = typer.Option(None, "--qps", min=0.001, help="Target create requests per second.")
CONCURRENCY = typer.Option(None, "--concurrency", min=1, help="At most this many in flight.")
NAMESPACE = typer.Option(None, "--namespace", help="Namespace the tool owns for its pods.")
DESIGN = typer.Option(
    None, "--design", help="gates-all, attribution, factorial, or baseline+singles+... parts."
)
DB = typer.Option(None, "--db", help="Results database (default: ABTEST_DB or ~/.local/share).")
JSON = typer.Option(False, "--json", help="Machine-readable output.")


def parse_sizes(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        from abtest.errors import UserError

        raise UserError(f"invalid sizes {text!r}", "--sizes", "e.g. --sizes 10,20") from None
    return sizes or None


def plan_options(
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


KUBECONFIG = typer.Option(
    None,
    "--kubeconfig",
    help="kubeconfig file(s), ':'-separated as in KUBECONFIG; overrides the profile's.",
)
CONTEXT = typer.Option(
    None, "--context", help="kubeconfig context to use; overrides the profile's context:."
)


def with_kube(profile: NodeProfile, kubeconfig: str | None, context: str | None) -> NodeProfile:
    """The profile with --kubeconfig/--context applied (kubectl's flags win over the file).

    A cluster named on the command line is checked before anything else happens, so a wrong
    context is one clear error here and not a failure half-way through a command."""
    if kubeconfig is None and context is None:
        return profile
    paths = (
        ":".join(str(Path(p).expanduser()) for p in kubeconfig.split(":") if p)
        if kubeconfig
        else None
    )
    chosen = replace(
        profile,
        kubeconfig=paths or profile.kubeconfig,
        kube_context=context or profile.kube_context,
    )
    # Imported here: the Kubernetes client costs every command that never talks to a cluster
    # (gates --list, plan) a second of start-up.
    from abtest.cluster.client import connect, probe

    probe(connect(chosen.kubeconfig, context=chosen.kube_context))
    return chosen
