"""Look, don't touch: the pre-flight checks (``abtest node check``) and the node's current
state (``abtest node show``). Every check runs and reports, pass or fail, with its reason;
a failing check never stops the others (problems are collected, pyperf-style)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from abtest.cluster.client import Cluster, connect
from abtest.cluster.nodes import configz, feature_enabled, node_status
from abtest.config.domain import Scalar
from abtest.config.playbook import NodeProfile, Workload
from abtest.errors import AbtestError, StoreError
from abtest.node import kubelet_config as kc
from abtest.node import kubelet_sources as ks
from abtest.node import remote_files as rf
from abtest.node.control import BACKUP_SUFFIX
from abtest.node.health import Expectation, HealthWaiter, compare, healthz_url, unknown_paths
from abtest.node.lock import LockInfo, NodeLock
from abtest.node.records import describe_settings
from abtest.node.session import NodeSession
from abtest.node.settle import SETTLED, settle
from abtest.store.db import Store
from abtest.store.journal import Journal


@dataclass(frozen=True)
class CheckItem:
    name: str
    ok: bool
    detail: str


@dataclass
class CheckReport:
    node_name: str
    items: list[CheckItem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.items) and all(i.ok for i in self.items)

    def add(self, name: str, fn: Callable[[], str]) -> bool:
        """Run one check: its return value is the detail; any AbtestError is the reason."""
        try:
            detail = fn()
        except AbtestError as exc:
            self.items.append(CheckItem(name, False, str(exc)))
            return False
        except (OSError, ValueError) as exc:
            self.items.append(CheckItem(name, False, f"{type(exc).__name__}: {exc}"))
            return False
        self.items.append(CheckItem(name, True, detail))
        return True

    def fail(self, name: str, detail: str) -> None:
        self.items.append(CheckItem(name, False, detail))

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node_name,
            "ok": self.ok,
            "checks": [{"name": i.name, "ok": i.ok, "detail": i.detail} for i in self.items],
        }


class _Failed(AbtestError):
    """A check's negative answer."""


def check(
    profile: NodeProfile,
    settings: Mapping[str, Scalar],
    *,
    store: Store,
    image: str | None = None,
    accept_new_host_key: bool = False,
) -> CheckReport:
    """Every pre-flight check, none of which changes anything."""
    report = CheckReport(profile.node_name)
    image = image or Workload().image
    with NodeSession(profile, accept_new_host_key=accept_new_host_key) as node:
        ssh = node.ssh
        text: list[str] = []
        locks: list[LockInfo] = []  # the lock, when one is held
        reach = "ssh" if profile.pod is None else "pod"  # the profile's transport
        if not report.add(reach, lambda: _ssh(node)):
            for name in ("sudo", "kubelet config", "kubelet sources", "image", "node lock"):
                report.fail(name, f"skipped: the node was not reached ({reach})")
        else:
            if profile.sudo:
                report.add("sudo", lambda: _sudo(node))
            report.add("kubelet config", lambda: _config(node, text))
            report.add("kubelet sources", lambda: _sources(node, settings))
            report.add("image", lambda: _image(node, image))
            report.add("node lock", lambda: _lock(node, locks))
        cluster: list[Cluster] = []
        report.add("api: node Ready", lambda: _ready(profile, cluster))
        if locks and cluster:
            report.add("lock's claim", lambda: _claim(profile, node, store, locks[0], cluster[0]))
        if text and ssh.connected:
            waiter_cluster = (
                cluster[0] if cluster else connect(profile.kubeconfig, context=profile.kube_context)
            )
            waiter = HealthWaiter(node, waiter_cluster, profile)
            url = healthz_url(profile, text[0])
            ok = waiter.healthz_ok(url)
            report.items.append(
                CheckItem("kubelet healthz", ok, f"{url} {'says' if ok else 'not'} ok")
            )
        if settings and cluster:
            view: list[tuple[dict[str, Any], dict[str, bool]]] = []
            if report.add("running kubelet", lambda: _view(profile, cluster[0], view)):
                config, gates = view[0]
                for path in settings:
                    known = not unknown_paths([path], config, gates)
                    where = "metric" if path.startswith("featureGates.") else "/configz"
                    detail = f"known ({where})" if known else f"unknown to the running {where}"
                    report.items.append(CheckItem(f"factor {path}", known, detail))
        settled = (
            node if ssh.connected and (not locks or locks[0].holder_alive() is False) else None
        )
        report.add("journal", lambda: _journal(profile, store, settled, locks))
    return report


def _ssh(node: NodeSession) -> str:
    node.ssh.run(["true"], timeout=20).check("ssh true")
    return node.ssh.endpoint.describe()


def _sudo(node: NodeSession) -> str:
    node.ssh.run(["true"], sudo=True, timeout=20).check("sudo -n true")
    return "passwordless sudo works"


def _config(node: NodeSession, out: list[str]) -> str:
    path = node.profile.kubelet_config_path
    data = rf.read_file(node.ssh, path, sudo=node.profile.sudo)
    text = data.decode("utf-8")
    kc.parse_config(text, where=path)
    out.append(text)
    return f"{path} parses ({len(data)} bytes, sha256 {rf.sha256(data)[:12]})"


def _sources(node: NodeSession, settings: Mapping[str, Scalar]) -> str:
    """The running kubelet reads the profile's config file, and no factor is also set by a
    flag or a drop-in (either would win over the file: see abtest.node.kubelet_sources)."""
    return ks.refuse_overridden(node, settings).describe()


def _image(node: NodeSession, image: str) -> str:
    if not node.image_present(image):
        raise _Failed(f"{image} is not on the node (pull or import it first)")
    return f"{image} present"


def _lock(node: NodeSession, out: list[LockInfo]) -> str:
    profile = node.profile
    held = NodeLock(node.ssh, profile.lock_path, sudo=profile.sudo).read()
    if held is not None:
        out.append(held)
        if held.state == "kept" or held.holder_alive() is False:
            hint = f"`abtest node restore --profile {profile.name}` undoes it and frees the lock"
            raise _Failed(f"held by {held.describe()} ({hint})")
        raise _Failed(f"held by {held.describe()}")
    return f"{profile.lock_path} free"


def _claim(
    profile: NodeProfile, node: NodeSession, store: Store, held: LockInfo, cluster: Cluster
) -> str:
    """Does the running kubelet show what the lock says is in effect? A kept lock names its
    settings; a working holder's are its journal entry's; none claimed: no backup of ours."""
    claim = held.claim
    if claim is None:
        try:
            entry = Journal(store).pending(profile.node_name)
        except StoreError:
            entry = None
        ours = entry is not None and entry.applied.get("lock_token") == held.token
        claim = entry.applied.get("settings", {}) if entry is not None and ours else {}
    if not claim:
        backup = profile.kubelet_config_path + BACKUP_SUFFIX
        if rf.exists(node.ssh, backup, sudo=profile.sudo):
            raise _Failed(f"the lock claims no change in effect, but {backup} is on the node")
        return "the lock claims no change in effect; no backup of ours on the node"
    config = configz(cluster, profile.node_name)
    gates = feature_enabled(cluster, profile.node_name)
    _, problems = compare([Expectation(p, v) for p, v in claim.items()], config, gates)
    if problems:
        raise _Failed(
            "the running kubelet does not match the lock's claim (" + "; ".join(problems) + ")"
        )
    return f"the running kubelet matches the lock's claim ({describe_settings(claim)})"


def _ready(profile: NodeProfile, out: list[Cluster]) -> str:
    cluster = connect(profile.kubeconfig, context=profile.kube_context)
    st = node_status(cluster, profile.node_name)
    out.append(cluster)
    if not st.ready:
        raise _Failed(f"Ready={st.ready}: {st.reason} {st.message}".strip())
    return f"Ready, kubelet {st.kubelet_version}"


def _view(
    profile: NodeProfile, cluster: Cluster, out: list[tuple[dict[str, Any], dict[str, bool]]]
) -> str:
    config = configz(cluster, profile.node_name)
    gates = feature_enabled(cluster, profile.node_name)
    out.append((config, gates))
    return f"/configz and metrics read ({len(gates)} gates known)"


def _journal(
    profile: NodeProfile, store: Store, node: NodeSession | None, locks: list[LockInfo]
) -> str:
    """Nothing pending; a change an earlier controller undid but could not journal (a store
    fault) is closed here, once the node proves it undone (abtest.node.settle)."""
    journal = Journal(store)
    if node is not None:
        lock = locks[0] if locks else None
        closed = settle(node.ssh, journal, profile.node_name, lock, sudo=profile.sudo)
        if closed is not None:
            return f"journal #{closed.id} {SETTLED}; no pending change in {store.name}"
    pending = journal.pending(profile.node_name)
    if pending is not None:
        raise _Failed(
            f"unrestored change #{pending.id} ({pending.state}) since {pending.created_at}: "
            f"run `abtest node restore --profile {profile.name}`"
        )
    return f"no pending change in {store.name}"


def show(
    profile: NodeProfile, *, store: Store, accept_new_host_key: bool = False
) -> dict[str, Any]:
    """The node as it is now. Unanswerable parts are None, with the reason in ``problems``."""
    out: dict[str, Any] = {
        "node": profile.node_name,
        "profile": profile.name,
        "config_path": profile.kubelet_config_path,
        "config_sha256": None,
        "feature_gates": None,
        "enabled_features": None,
        "kubelet_version": None,
        "ready": None,
        "healthz": None,
        "healthy": False,
        "lock_holder": None,
        "lock": None,
        "backup_on_node": None,
        "pending_change": None,
        "problems": [],
    }
    problems: list[str] = out["problems"]
    text = None
    with NodeSession(profile, accept_new_host_key=accept_new_host_key) as node:
        try:
            data = rf.read_file(node.ssh, profile.kubelet_config_path, sudo=profile.sudo)
            out["config_sha256"] = rf.sha256(data)
            text = data.decode("utf-8", "replace")
            held = NodeLock(node.ssh, profile.lock_path, sudo=profile.sudo).read()
            out["lock"] = held.__dict__ if held else None
            out["lock_holder"] = held.describe() if held else None
            backup = profile.kubelet_config_path + BACKUP_SUFFIX
            out["backup_on_node"] = rf.exists(node.ssh, backup, sudo=profile.sudo)
        except AbtestError as exc:
            problems.append(f"ssh: {exc}")
        try:
            cluster = connect(profile.kubeconfig, context=profile.kube_context)
            st = node_status(cluster, profile.node_name)
            out["ready"] = st.ready
            out["kubelet_version"] = st.kubelet_version
            config = configz(cluster, profile.node_name)
            out["feature_gates"] = config.get("featureGates") or {}
            gates = feature_enabled(cluster, profile.node_name)
            out["enabled_features"] = sorted(g for g, on in gates.items() if on)
            if text is not None:
                url = healthz_url(profile, text)
                out["healthz"] = HealthWaiter(node, cluster, profile).healthz_ok(url)
        except AbtestError as exc:
            problems.append(f"api: {exc}")
    pending = Journal(store).pending(profile.node_name)
    if pending is not None:
        out["pending_change"] = {
            "journal_id": pending.id,
            "state": pending.state,
            "settings": pending.applied.get("settings"),
            "since": pending.created_at,
        }
    out["healthy"] = bool(out["ready"] and out["healthz"])
    return out
