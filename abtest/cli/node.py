"""`abtest node check | show | apply | restore`: a node's kubelet, changed safely over SSH."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from abtest.cli import options as o
from abtest.cli.render import console, err_console, print_json, print_table
from abtest.domain import Scalar
from abtest.errors import UserError
from abtest.node import control, preflight
from abtest.node.kubelet_config import parse_set_option
from abtest.node.records import ApplyRecord, RestoreRecord
from abtest.node.signals import Interrupted
from abtest.playbook import NodeProfile, load_profile
from abtest.store.db import Store, default_path

app = typer.Typer(
    help="Check, show, change (apply) and restore a node's kubelet config over SSH.",
    no_args_is_help=True,
)

PROFILE = typer.Option(..., "--profile", "-p", help="Node profile: a name (lab) or a YAML path.")
DB = typer.Option(None, "--db", help="Results database (default: $ABTEST_DB or the user's).")
ACCEPT = typer.Option(
    False, "--accept-new-host-key", help="Trust and record the host key of a node seen first."
)
JSON = typer.Option(False, "--json", help="Machine-readable output on stdout.")
SETS = typer.Option(
    None, "--set", help="PATH=VALUE, repeatable: featureGates.X=true, kubeAPIQPS=5."
)
TIMEOUT = typer.Option(None, "--timeout", help="Seconds for restart to healthy (profile: 120).")
BREAK = typer.Option(False, "--break-lock", help="Take over a stale node lock.")


def _settings(options: list[str] | None) -> dict[str, Scalar]:
    settings: dict[str, Scalar] = {}
    for option in options or []:
        path, value = parse_set_option(option)
        if path in settings:
            raise UserError(f"{path} is given twice", "--set")
        settings[path] = value
    return settings


def _store(db: Path | None) -> Store:
    return Store(db or default_path())


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


def _run(fn: Callable[[], Any]) -> Any:
    with _interruptible():
        return fn()


@app.command("check")
def check(
    profile: str = PROFILE,
    kubeconfig: str | None = o.KUBECONFIG,
    context: str | None = o.CONTEXT,
    sets: list[str] | None = SETS,
    image: str | None = typer.Option(None, "--image", help="Workload image that must be present."),
    db: Path | None = DB,
    accept_new_host_key: bool = ACCEPT,
    json_out: bool = JSON,
) -> None:
    """Pre-flight, no change: SSH + sudo, config parses, node Ready, factors known, image
    present, lock free, nothing pending. Exit 0 only if every check passes."""
    prof: NodeProfile = o.with_kube(load_profile(profile), kubeconfig, context)
    settings = _settings(sets)
    with _store(db) as store:
        report = preflight.check(
            prof, settings, store=store, image=image, accept_new_host_key=accept_new_host_key
        )
    if json_out:
        print_json(report.as_dict())
    else:
        rows = [("PASS" if i.ok else "FAIL", i.name, i.detail) for i in report.items]
        print_table(f"node check: {prof.node_name}", ["result", "check", "detail"], rows)
    if not report.ok:
        raise typer.Exit(1)


@app.command("show")
def show(
    profile: str = PROFILE,
    kubeconfig: str | None = o.KUBECONFIG,
    context: str | None = o.CONTEXT,
    db: Path | None = DB,
    accept_new_host_key: bool = ACCEPT,
    json_out: bool = JSON,
) -> None:
    """The running kubelet: gates from /configz, gates enabled per its metric, config
    sha256, version, health, lock holder, any pending change."""
    prof = o.with_kube(load_profile(profile), kubeconfig, context)
    with _store(db) as store:
        state = preflight.show(prof, store=store, accept_new_host_key=accept_new_host_key)
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
def apply(
    profile: str = PROFILE,
    kubeconfig: str | None = o.KUBECONFIG,
    context: str | None = o.CONTEXT,
    sets: list[str] | None = SETS,
    timeout: float | None = TIMEOUT,
    break_lock: bool = BREAK,
    accept_new_host_key: bool = ACCEPT,
    skip_factor_check: bool = typer.Option(
        False,
        "--skip-factor-check",
        help="Do not refuse factors the kubelet does not list, or that a kubelet flag or "
        "drop-in file overrides.",
    ),
    db: Path | None = DB,
    json_out: bool = JSON,
) -> None:
    """Lock the node, keep the original, write the change atomically, restart the kubelet,
    and prove it healthy with the values in effect; roll back on any failure."""
    prof = o.with_kube(load_profile(profile), kubeconfig, context)
    settings = _settings(sets)
    if not settings:
        raise UserError("nothing to apply", "--set", "e.g. --set featureGates.X=true")
    with (
        _store(db) as store,
        control.NodeController(
            prof,
            store,
            timeout=timeout,
            accept_new_host_key=accept_new_host_key,
            break_lock=break_lock,
            progress=_progress,
        ) as ctl,
    ):
        rec = _run(lambda: ctl.apply(settings, check_known=not skip_factor_check))
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
        console.print(f"undo with: abtest node restore --profile {profile}", highlight=False)


@app.command("restore")
def restore(
    profile: str = PROFILE,
    kubeconfig: str | None = o.KUBECONFIG,
    context: str | None = o.CONTEXT,
    timeout: float | None = TIMEOUT,
    break_lock: bool = BREAK,
    accept_new_host_key: bool = ACCEPT,
    db: Path | None = DB,
    json_out: bool = JSON,
    force: bool = typer.Option(
        False,
        "--force",
        help="Put the originals back even over a config or binary that changed since abtest "
        "wrote it (someone else's edit is overwritten).",
    ),
) -> None:
    """Put back the original config (and kubelet binary) from the journal, or from the
    backup and marker on the node when this database has none; restart, verify healthy,
    release the lock. Nothing to do is not an error. A file someone else changed since
    abtest wrote it is refused and left as found (exit 2) unless --force."""
    prof = o.with_kube(load_profile(profile), kubeconfig, context)
    with (
        _store(db) as store,
        control.NodeController(
            prof,
            store,
            timeout=timeout,
            accept_new_host_key=accept_new_host_key,
            break_lock=break_lock,
            progress=_progress,
        ) as ctl,
    ):
        rec = _run(lambda: ctl.restore(force=force))
    if json_out:
        print_json(rec.as_dict())
        return
    console.print(rec.message, highlight=False)
    if rec.restored:
        _stage_table(f"restored {rec.node_name} (journal #{rec.journal_id})", rec)
        _verified_table(rec.health.verified if rec.health else {})
