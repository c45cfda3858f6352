"""`abtest node`'s use-cases: check, show, apply and restore one node's kubelet, each with the
results database its journal and lock live in. A program calls these as the commands do."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from abtest.config.domain import Scalar
from abtest.config.playbook import NodeProfile
from abtest.errors import UserError
from abtest.node import control, preflight
from abtest.node.kubelet_config import parse_set_option
from abtest.node.records import ApplyRecord, RestoreRecord
from abtest.store.db import DbTarget, Store


def settings_of(options: list[str] | None) -> dict[str, Scalar]:
    """The kubelet settings ``--set PATH=VALUE`` options name, each path once."""
    settings: dict[str, Scalar] = {}
    for option in options or []:
        path, value = parse_set_option(option)
        if path in settings:
            raise UserError(f"{path} is given twice", "--set")
        settings[path] = value
    return settings


@dataclass(frozen=True)
class NodeAccess:
    """How to reach and hold the node: the profile (kube flags applied), the database with
    its journal, the restart timeout, and the host-key and lock choices."""

    profile: NodeProfile
    db: DbTarget = None
    timeout: float | None = None
    accept_new_host_key: bool = False
    break_lock: bool = False


def check_node(
    profile: NodeProfile,
    settings: Mapping[str, Scalar],
    *,
    image: str | None,
    db: DbTarget,
    accept_new_host_key: bool,
) -> preflight.CheckReport:
    with Store(db) as store:
        return preflight.check(
            profile, settings, store=store, image=image, accept_new_host_key=accept_new_host_key
        )


def show_node(profile: NodeProfile, *, db: DbTarget, accept_new_host_key: bool) -> dict[str, Any]:
    with Store(db) as store:
        return preflight.show(profile, store=store, accept_new_host_key=accept_new_host_key)


def apply_settings(
    access: NodeAccess,
    settings: Mapping[str, Scalar],
    *,
    check_known: bool,
    progress: Callable[[str], None],
) -> ApplyRecord:
    """Lock, keep the original, write, restart, verify in effect; rolled back on failure."""
    if not settings:
        raise UserError("nothing to apply", "--set", "e.g. --set featureGates.X=true")
    with Store(access.db) as store, _controller(access, store, progress) as ctl:
        return ctl.apply(settings, check_known=check_known)


def restore_node(
    access: NodeAccess, *, force: bool, progress: Callable[[str], None]
) -> RestoreRecord:
    """Put the originals back (journal, else the node's backup and marker); verify healthy."""
    with Store(access.db) as store, _controller(access, store, progress) as ctl:
        return ctl.restore(force=force)


def _controller(
    access: NodeAccess, store: Store, progress: Callable[[str], None]
) -> control.NodeController:
    return control.NodeController(
        access.profile,
        store,
        timeout=access.timeout,
        accept_new_host_key=access.accept_new_host_key,
        break_lock=access.break_lock,
        progress=progress,
    )
