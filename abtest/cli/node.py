"""`abtest node check | show | apply | restore`: a node's kubelet, changed safely over SSH."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from abtest.app.node import (
    NodeAccess,
    apply_settings,
    check_node,
    restore_node,
    settings_of,
    show_node,
)
from abtest.cli import options as o
from abtest.cli.options import OptionGroup
from abtest.cli.render import console, err_console, print_json, print_table
from abtest.config import numbers as num
from abtest.config.playbook import NodeProfile, load_profile
from abtest.errors import Interrupted

if TYPE_CHECKING:
    from abtest.node.records import ApplyRecord, RestoreRecord

app = typer.Typer(
    help="Check, show, change (apply) and restore a node's kubelet config over SSH.",
    no_args_is_help=True,
)

Sets = Annotated[
    list[str] | None,
    typer.Option("--set", help="PATH=VALUE, repeatable: featureGates.X=true, kubeAPIQPS=5."),
]
Timeout = Annotated[
    float | None,
    o.ranged("--timeout", num.HEALTH_TIMEOUT_S, "Seconds for restart to healthy (profile: 120)."),
]


@dataclass(frozen=True)
class NodeTarget:
    """The node a node command acts on: its profile as given, the kubeconfig and context."""

    profile: o.Profile
    kubeconfig: o.Kubeconfig = None
    context: o.Context = None

    def load(self) -> NodeProfile:
        return o.with_kube(load_profile(self.profile), self.kubeconfig, self.context)


NODE_TARGET = OptionGroup.of(NodeTarget)


@dataclass(frozen=True)
class NodeChange:
    """How apply and restore reach the node to change it."""

    timeout: Timeout = None
    break_lock: o.BreakLock = False
    accept_new_host_key: o.AcceptNewHostKey = False

    def access(self, profile: NodeProfile, db: str | None) -> NodeAccess:
        return NodeAccess(profile, db, self.timeout, self.accept_new_host_key, self.break_lock)


NODE_CHANGE = OptionGroup.of(NodeChange)


def _progress(line: str) -> None:
    err_console.print(f"  {line}", highlight=False, markup=False)


@contextmanager
def _interruptible() -> Iterator[None]:
    try:
        yield
    except Interrupted as exc:
        err_console.print(f"abtest: {exc}; the node was restored", style="red")
        raise typer.Exit(exc.exit_code) from None


def _seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _stage_table(title: str, rec: ApplyRecord | RestoreRecord) -> None:
    print_table(
        title,
        ["restart command", "restart→healthz", "restart→Ready", "restart→verified", "total"],
        [
            (
                _seconds(rec.restart_command_s),
                _seconds(rec.restart_to_healthz_s),
                _seconds(rec.restart_to_ready_s),
                _seconds(rec.restart_to_verified_s),
                _seconds(rec.total_s),
            )
        ],
    )


def _verified_table(verified: dict[str, dict[str, Any]]) -> None:
    if verified:
        print_table(
            "verified on the running kubelet",
            ["setting", "expected", "/configz", "metric"],
            [
                (p, v.get("expected"), v.get("configz"), v.get("metric", ""))
                for p, v in verified.items()
            ],
        )


@app.command("check")
@NODE_TARGET.into("target")
def check(
    *,
    target: NodeTarget,
    sets: Sets = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Workload image that must be present.")
    ] = None,
    db: o.Db = None,
    accept_new_host_key: o.AcceptNewHostKey = False,
    json_out: o.Json = False,
) -> None:
    """Pre-flight, no change: SSH + sudo, config parses, node Ready, factors known, image
    present, lock free (a held lock: whether the running kubelet matches its claim), nothing
    pending. Exit 0 only if every check passes."""
    prof = target.load()
    report = check_node(
        prof, settings_of(sets), image=image, db=db, accept_new_host_key=accept_new_host_key
    )
    if json_out:
        print_json(report.as_dict())
    else:
        rows = [("PASS" if i.ok else "FAIL", i.name, i.detail) for i in report.items]
        print_table(f"node check: {prof.node_name}", ["result", "check", "detail"], rows)
    if not report.ok:
        raise typer.Exit(1)


@app.command("show")
@NODE_TARGET.into("target")
def show(
    *,
    target: NodeTarget,
    db: o.Db = None,
    accept_new_host_key: o.AcceptNewHostKey = False,
    json_out: o.Json = False,
) -> None:
    """The running kubelet: gates from /configz, gates enabled per its metric, config
    sha256, version, health, lock holder, any pending change."""
    prof = target.load()
    state = show_node(prof, db=db, accept_new_host_key=accept_new_host_key)
    if json_out:
        print_json(state)
        return
    rows = [
        ("kubelet version", state["kubelet_version"]),
        ("healthy", f"{state['healthy']} (Ready={state['ready']}, healthz={state['healthz']})"),
        ("config", f"{state['config_path']} sha256 {state['config_sha256']}"),
        ("feature gates (/configz)", state["feature_gates"]),
        ("enabled features (metric)", len(state["enabled_features"] or [])),
        ("lock holder", state["lock_holder"] or "free"),
        ("pending change", state["pending_change"] or "none"),
    ]
    rows += [("problem", p) for p in state["problems"]]
    print_table(f"node {state['node']} (profile {state['profile']})", ["", ""], rows)


@app.command("apply")
@NODE_TARGET.into("target")
@NODE_CHANGE.into("change")
def apply(
    *,
    target: NodeTarget,
    sets: Sets = None,
    change: NodeChange,
    skip_factor_check: Annotated[
        bool,
        typer.Option(
            "--skip-factor-check",
            help="Do not refuse factors the kubelet does not list, or that a kubelet flag or "
            "drop-in file overrides.",
        ),
    ] = False,
    db: o.Db = None,
    json_out: o.Json = False,
) -> None:
    """Lock the node, keep the original, write the change atomically, restart the kubelet,
    and prove it healthy with the values in effect; roll back on any failure."""
    prof = target.load()
    access = change.access(prof, db)
    settings = settings_of(sets)
    with _interruptible():
        rec = apply_settings(
            access, settings, check_known=not skip_factor_check, progress=_progress
        )
    if json_out:
        print_json(rec.as_dict())
        return
    if rec.diff:
        console.print(rec.diff, highlight=False, markup=False, end="")
    for msg in rec.messages:
        console.print(msg, highlight=False)
    _stage_table(f"applied on {rec.node_name} (journal #{rec.journal_id})", rec)
    _verified_table(rec.verified)
    if rec.journal_id is not None:
        console.print(f"undo with: abtest node restore --profile {target.profile}", highlight=False)


@app.command("restore")
@NODE_TARGET.into("target")
@NODE_CHANGE.into("change")
def restore(
    *,
    target: NodeTarget,
    change: NodeChange,
    db: o.Db = None,
    json_out: o.Json = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Put the originals back even over a config or binary that changed since "
            "abtest wrote it (someone else's edit is overwritten).",
        ),
    ] = False,
) -> None:
    """Put back the original config (and kubelet binary) from the journal, or from the
    backup and marker on the node when this database has none; restart, verify healthy,
    release the lock (also one whose holder process is gone from this host, with nothing to
    put back). Nothing to do is not an error. A file someone else changed since
    abtest wrote it is refused and left as found (exit 2) unless --force."""
    prof = target.load()
    access = change.access(prof, db)
    with _interruptible():
        rec = restore_node(access, force=force, progress=_progress)
    if json_out:
        print_json(rec.as_dict())
        return
    console.print(rec.message, highlight=False)
    if rec.restored:
        _stage_table(f"restored {rec.node_name} (journal #{rec.journal_id})", rec)
        _verified_table(rec.health.verified if rec.health else {})
