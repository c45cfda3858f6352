"""Apply a kubelet config change to a node, prove it healthy, and always be able to undo it.

:class:`NodeController` is the one flow for ``abtest node apply|restore`` and the sweep:

- apply: node lock -> original kept (journal row with the bytes, plus a copy on the node)
  -> new config written atomically -> restart -> healthz, Ready, values verified. Any
  failure (or SIGINT/SIGTERM) rolls back: original written, restart, healthy again, and
  :class:`~abtest.errors.ApplyFailed` carries what failed and the kubelet's last log lines.
  A second ``apply`` on the same controller switches settings (always computed from the
  original, never stacked).
- restore: the journal's original back, restart, healthy, journal closed, lock released.

Someone else's edit is never overwritten: a config write checks on the node, just before the
rename, that the file is still the bytes we read, and a restore (or the next arm) first
checks that the file is the original or bytes we wrote (the journal, or the marker beside
the node-side backup when this database has no entry). Otherwise: refused with a clear
message, the node left as found (no write, no restart), journal state ``changed``;
``restore(force=True)`` (``abtest node restore --force``) overrides. Every remote change
happens inside the block that undoes it: a backup that cannot be written leaves no
pending entry and no kept lock.

:func:`abtest.node.applied.applied` wraps it for a ``with`` block: apply on enter, restore
on exit, on an exception and on SIGINT/SIGTERM.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from abtest.cluster.client import Cluster, connect
from abtest.cluster.nodes import configz, feature_enabled
from abtest.config.domain import Scalar
from abtest.config.playbook import NodeProfile
from abtest.errors import NodeError, StoreError, UserError
from abtest.node import kubelet_config as kc
from abtest.node import kubelet_sources as ks
from abtest.node import remote_files as rf
from abtest.node import restart, settle
from abtest.node.apply_plan import ApplyPlan, checked_settings, plan_apply
from abtest.node.binary import KubeletBinary
from abtest.node.config_file import BACKUP_SUFFIX, ConfigFile
from abtest.node.health import Expectation, HealthReport, restore_expectations, unknown_paths
from abtest.node.lock import NodeLock
from abtest.node.lock_exit import leave_lock, pending_changes
from abtest.node.records import (
    ApplyRecord,
    RestoreRecord,
    RolledBack,
    describe_settings,
    reason_of,
    text_of,
)
from abtest.node.remote_files import MARKER_SUFFIX, ChangedUnderUs
from abtest.node.session import NodeSession
from abtest.process.closing import Closing
from abtest.process.stop import SignalGuard
from abtest.store.db import Store
from abtest.store.journal import APPLIED, APPLYING, FAILED, RESTORED, Journal, JournalEntry

#: Test hook: ``ABTEST_NODE_TEST_HOOK=kill-after-write`` SIGKILLs the controller right after
#: the new config is written (tests prove ``abtest node restore`` recovers from that).
TEST_HOOK_ENV = "ABTEST_NODE_TEST_HOOK"
__all__ = ["BACKUP_SUFFIX", "MARKER_SUFFIX", "NodeController", "describe_settings"]
LOG_LINES = 40

Progress = Callable[[str], None]


def _test_hook(point: str) -> None:
    if os.environ.get(TEST_HOOK_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


class NodeController(Closing):
    """``with NodeController(profile, store) as ctl: ctl.apply({...}); ctl.restore()``."""

    guard: SignalGuard

    def __init__(
        self,
        profile: NodeProfile,
        store: Store,
        *,
        timeout: float | None = None,
        accept_new_host_key: bool = False,
        break_lock: bool = False,
        progress: Progress | None = None,
        session: NodeSession | None = None,
        cluster: Cluster | None = None,
        run_id: str | None = None,
    ) -> None:
        """``session`` and ``cluster``: the node and the API server to use (built from the
        profile when None; a test passes a scripted fake node, abtest.testing.FakeHost).
        ``run_id``: the run whose changes these are, recorded in the journal (None: none's)."""
        self.profile = profile
        self.timeout = float(timeout or profile.health_timeout_s)
        self.break_lock = break_lock
        self.progress = progress or (lambda _msg: None)
        self.session = session or NodeSession(profile, accept_new_host_key=accept_new_host_key)
        self.ssh = self.session.ssh
        self.sudo = profile.sudo
        self.cluster = cluster or connect(profile.kubeconfig, context=profile.kube_context)
        self.journal = Journal(store, run_id=run_id)
        self.lock = NodeLock(
            self.ssh, profile.lock_path, sudo=profile.sudo, profile_name=profile.name
        )
        self.guard = SignalGuard()
        self._config_path: str | None = None

    # --- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Release the lock unless a change it protects is still in effect; disconnect.

        What is in effect is what this controller knows (its journal remembers what it could
        not write), so a database fault never leaves a lock claiming a change that is undone."""
        try:
            leave_lock(self.lock, self.journal, self.profile)
        except NodeError as exc:
            self.progress(f"could not release the node lock: {exc}")
        finally:
            self.session.close()

    @property
    def node(self) -> str:
        return self.profile.node_name

    @property
    def config_path(self) -> str:
        if self._config_path is None:
            self._config_path = rf.realpath(
                self.ssh, self.profile.kubelet_config_path, sudo=self.sudo
            )
        return self._config_path

    @property
    def backup_path(self) -> str:
        return self.config_path + BACKUP_SUFFIX

    @property
    def files(self) -> ConfigFile:
        return ConfigFile(self.session, self.journal, self.config_path, self.progress)

    # --- building blocks --------------------------------------------------------------

    def read_config(self, path: str | None = None) -> bytes:
        return rf.read_file(self.ssh, path or self.config_path, sudo=self.sudo)

    def running_view(self) -> tuple[dict[str, Any], dict[str, bool]]:
        """The running kubelet's /configz and its feature gates (from the metric)."""
        return configz(self.cluster, self.node), feature_enabled(self.cluster, self.node)

    def restart_and_wait(
        self, expectations: list[Expectation], config_text: str
    ) -> tuple[HealthReport, float]:
        """Restart with the profile's command; wait for healthz, Ready, verified values.
        A put-back original binary now runs: its backup goes (KubeletBinary.settle)."""
        result = restart.restart_and_wait(
            self.profile,
            self.session,
            self.cluster,
            expectations,
            config_text,
            guard=self.guard,
            timeout=self.timeout,
            progress=self.progress,
        )
        entry = self.journal.pending(self.node, kind="binary")
        if entry is not None and entry.applied.get("put_back"):
            with self.guard.shield():
                KubeletBinary(self.session, self.journal).settle()
        return result

    # --- apply ------------------------------------------------------------------------

    def apply(
        self,
        settings: Mapping[str, Scalar],
        *,
        check_known: bool = True,
        force_restart: bool = False,
    ) -> ApplyRecord:
        """Make ``settings`` (relative to the original config) the node's running config.

        ``check_known``: refuse paths the running kubelet does not list, before any change.
        ``force_restart``: restart even when the values are already in effect (so every
        visit of a sweep starts from a freshly restarted kubelet). ``{}`` means "the
        original config" (useful between arms; the CLI insists on at least one --set).
        """
        t0 = time.monotonic()
        checked = checked_settings(settings)
        token = self._hold_lock(f"apply {describe_settings(checked)}")
        pending = self._own_pending(token)
        current = self.read_config()
        if pending is not None:
            self.files.check_ours(pending, current)  # not someone else's edit since our write
        else:
            self.files.require_no_backup()
        original = pending.original if pending else current
        where = f"{self.node}:{self.config_path}"
        new_text = kc.apply_settings(text_of(original, where), checked, where=where)
        config, gates = self.running_view()
        if check_known:
            self._refuse_unknown(list(checked), config, gates)
        plan = plan_apply(
            checked,
            node_name=self.node,
            config_path=self.config_path,
            current=current,
            new_text=new_text,
            pending=pending,
            config=config,
            gates=gates,
            lock_token=token,
        )
        if (
            not plan.record.changed
            and not force_restart
            and plan.record_if_in_effect(config, gates)
        ):
            plan.record.messages.append("already in effect: no write, no restart")
        else:
            self._write_and_restart(plan, pending, current)
        plan.record.total_s = time.monotonic() - t0
        return plan.record

    def _own_pending(self, token: str) -> JournalEntry | None:
        """The change this node has pending: an earlier arm's under our lock, or none."""
        pending = self.journal.pending(self.node)
        if pending is not None and pending.applied.get("lock_token") != token:
            # an earlier controller restored it but could not journal that (a store fault)
            if settle.undone_on_node(self.ssh, pending, None, sudo=self.sudo):
                self.journal.mark(pending.id, RESTORED, detail=settle.SETTLED)
                self.progress(f"journal #{pending.id}: {settle.SETTLED}")
                return None
            raise NodeError(
                f"node {self.node} has an unrestored change (journal #{pending.id}, "
                f"{pending.state} since {pending.created_at}); run "
                f"`abtest node restore --profile {self.profile.name}` first"
            )
        return pending

    def _refuse_unknown(
        self, paths: list[str], config: Mapping[str, Any], gates: Mapping[str, bool]
    ) -> None:
        """Before any change: a path the running kubelet does not know, or one a kubelet flag
        or drop-in sets (it would win over the file, so the change could never show)."""
        if unknown := unknown_paths(paths, config, gates):
            raise UserError(
                f"the running kubelet does not know {', '.join(unknown)}",
                where=self.node,
                todo="check the names (abtest node show); --skip-factor-check lets the "
                "kubelet itself decide",
            )
        if paths:
            ks.refuse_overridden(self.session, paths)

    def _write_and_restart(
        self, plan: ApplyPlan, pending: JournalEntry | None, current: bytes
    ) -> None:
        """Journal, keep the original, write, restart, verify; any failure or signal from the
        first change on rolls back (:meth:`_rollback`) or, if nothing of ours took effect,
        abandons the entry (:meth:`_abandon`)."""
        record = plan.record
        if pending is None:
            entry = self.journal.begin(
                node_name=self.node,
                profile_name=self.profile.name,
                path=self.config_path,
                original=current,
                applied=plan.applied,
                backup_path=self.backup_path,
            )
        else:
            entry = self.journal.mark(pending.id, APPLYING, applied=plan.applied)
        record.journal_id = entry.id
        stage = "keep"  # nothing of ours on the node yet
        try:
            if pending is None:
                self.files.keep_original(current, plan.marker)
                self.progress(f"original kept: journal #{entry.id} and {self.backup_path}")
            stage = "write"
            if record.changed:
                with self.guard.shield():
                    self.files.write(plan.new, current=current, marker=plan.marker)
                self.progress(f"wrote {self.config_path} (sha256 {record.config_sha256[:12]})")
            _test_hook("kill-after-write")
            stage = "restart"
            record.health, record.restart_command_s = self.restart_and_wait(
                plan.expectations, plan.new_text
            )
            record.restarted = True
            self.journal.mark(entry.id, APPLIED, detail=describe_settings(record.settings))
        except BaseException as exc:
            changed = isinstance(exc, ChangedUnderUs)
            if pending is None and (stage == "keep" or changed):
                self._abandon(entry, exc, stage)  # our config was never written
            if changed:  # between our check and the rename: someone else's, left as found
                self.files.refuse(entry, getattr(exc, "found", "?"))
            self._rollback(entry, exc)

    def _abandon(self, entry: JournalEntry, exc: BaseException, stage: str) -> NoReturn:
        """Nothing of ours took effect: remove the backup if we made it (``keep_original``
        leaves none when it fails), close the journal entry, raise the cause."""
        with self.guard.shield():
            self.ssh.reconnect()  # an interrupted transfer may have left a channel mid-way
            self.files.abandon(entry, exc, made_backup=stage != "keep")
        if isinstance(exc, ChangedUnderUs) and stage == "write":
            raise ChangedUnderUs(
                f"{self.config_path} changed under us between our read and our write; "
                "left as found (no write, no restart)",
                f"node {self.node}",
                "look at what changed it, then try again",
                found=exc.found,
            ) from exc
        raise exc

    def _hold_lock(
        self, purpose: str, takeover_token: str | None = None, *, reclaim_dead: bool = False
    ) -> str:
        if self.lock.held is None:
            self.lock.acquire(
                purpose,
                break_lock=self.break_lock,
                takeover_token=takeover_token,
                reclaim_dead=reclaim_dead,
            )
        assert self.lock.held is not None
        return self.lock.held.token

    def _rollback(self, entry: JournalEntry, exc: BaseException) -> NoReturn:
        reason = reason_of(exc)
        self.progress(f"apply failed ({reason}); rolling back to the original config")
        tail = ""
        binary_back = False
        with self.guard.shield():
            try:
                self.ssh.reconnect()  # an interrupted transfer may have left a channel mid-way
                if isinstance(exc, Exception):
                    tail = self.session.kubelet_log_tail(LOG_LINES)
                # checked before anything changes: someone else's edit is left as found
                self.files.check_ours(entry, self.read_config(entry.path))
                # a candidate binary that does not start goes too, or the rollback fails alike
                binary_back = KubeletBinary(self.session, self.journal).put_back()
                restore = self._put_back(entry, f"rolled back: {reason}")
            except ChangedUnderUs:
                raise  # journaled as changed; nothing was written
            except BaseException as failure:
                detail = f"apply failed: {reason}; rollback failed: {reason_of(failure)}"
                self.journal.close_entry(entry.id, FAILED, detail)
                raise NodeError(
                    f"{detail}. The node may be unhealthy: check it, then run "
                    f"`abtest node restore --profile {self.profile.name}`"
                ) from failure
        if not isinstance(exc, Exception) or isinstance(exc, StoreError):
            raise exc  # a signal, or the database: no fault of the arm's, the node is back
        secs = restore.restart_to_verified_s or 0.0
        what = "config and kubelet binary" if binary_back else "config"
        message = f"{reason}; rolled back to the original {what} (healthy {secs:.1f} s later)"
        if tail:
            message += f"\n--- kubelet log, last lines ---\n{tail}"
        raise RolledBack(message, getattr(exc, "stage", None), restore, tail) from exc

    # --- restore ----------------------------------------------------------------------

    def restore(self, *, force: bool = False) -> RestoreRecord:
        """Put the journal's original back (or the node's backup when this database has no
        journal entry), restart, verify healthy. A no-op with a message if nothing pends.

        The config and the binary must be the originals or what we wrote, checked before
        anything changes; else :class:`ChangedUnderUs` and the node is left as found.
        ``force``: put the originals back over whatever is there."""
        with self.guard.shield():
            binary = KubeletBinary(self.session, self.journal)
            entry = self.journal.pending(self.node) or self.files.adopt()
            bin_entry = binary.pending() or binary.adopt()
            if entry is None and bin_entry is None:
                return RestoreRecord(
                    node_name=self.node,
                    restored=False,
                    journal_id=None,
                    message=f"nothing to restore: no pending change for {self.node} in "
                    f"{self.journal.store.name} and no {self.backup_path} or "
                    f"{binary.backup} on the node{self._free_dead_lock()}",
                )
            tokens = [e.applied.get("lock_token") for e in (entry, bin_entry) if e is not None]
            token = next((str(t) for t in tokens if t), None)
            what = f"restore journal #{(entry or bin_entry).id}"  # type: ignore[union-attr]
            self._hold_lock(what, token, reclaim_dead=True)
            if entry is not None:
                self.files.check_ours(entry, self.read_config(entry.path), force=force)
            if bin_entry is not None:
                binary.check_ours(bin_entry, force=force)
                binary.put_back(force=True)  # checked just above
                self.progress(f"original kubelet binary back at {binary.path}")
            if entry is not None:
                return self._put_back(entry, "restored by abtest node restore", force=force)
            t0 = time.monotonic()
            text = text_of(self.read_config(), self.config_path)
            health, restart_s = self.restart_and_wait([], text)
            return RestoreRecord(
                node_name=self.node,
                restored=True,
                journal_id=bin_entry.id if bin_entry else None,
                message="original kubelet binary back",
                health=health,
                restart_command_s=restart_s,
                total_s=time.monotonic() - t0,
            )

    def _free_dead_lock(self) -> str:
        """Nothing to restore, but a lock whose holder is gone from this host: freed (taken
        here, released by :meth:`close`). Returns what to add to the message."""
        held = self.lock.read()
        if held is None or held.holder_alive() is not False:
            return ""
        self._hold_lock("restore: free a lock whose holder is gone", reclaim_dead=True)
        return f"; freed the lock of {held.holder} pid {held.pid}, which no longer runs"

    def install_kubelet_binary(self, candidate: str | None) -> str:
        """Put ``candidate`` (a file on the node; None: the original) at the profile's
        kubelet binary path, journaled and verified; returns its sha256. Takes effect at the
        next restart (the next ``apply(..., force_restart=True)``)."""
        binary = KubeletBinary(self.session, self.journal)
        if candidate is not None:
            binary.require_candidate(candidate)  # before the lock or anything else changes
        token = self._hold_lock(f"kubelet binary {candidate or 'original'}", self._binary_token())
        with self.guard.shield():
            return binary.install(candidate, lock_token=token).sha256

    def has_pending_change(self) -> bool:
        """A config or binary change of ours is in effect (restore() puts both back); known
        without the database when it fails (a sweep's store fault still restores)."""
        return bool(pending_changes(self.journal, self.node))

    def _binary_token(self) -> str | None:
        for kind in ("binary", "config"):
            entry = self.journal.pending(self.node, kind=kind)
            if entry is not None and entry.applied.get("lock_token"):
                return str(entry.applied["lock_token"])
        return None

    def _put_back(self, entry: JournalEntry, why: str, *, force: bool = False) -> RestoreRecord:
        t0 = time.monotonic()
        original = entry.original
        if rf.sha256(original) != entry.original_sha256:
            raise NodeError(f"journal #{entry.id}: the kept original does not match its sha256")
        text = text_of(original, f"journal #{entry.id}")
        current = self.read_config(entry.path)
        self.files.check_ours(entry, current, force=force)
        if current != original:
            self.files.put_original(entry, current)
        health, restart_s = self.restart_and_wait(restore_expectations(entry, text), text)
        # the node is back and verified: a database fault now changes none of that (the
        # backup goes too, so the next controller sees the change undone: abtest.node.settle)
        fault = self.journal.close_entry(entry.id, RESTORED, why)
        if entry.backup_path:
            try:
                self.files.remove_backup(entry.backup_path)
            except NodeError as exc:
                self.progress(f"could not remove {entry.backup_path}: {exc}")
        if fault is not None:
            why += f"; journal #{entry.id} could not be closed ({fault}): the next run closes it"
            self.progress(why)
        return RestoreRecord(
            node_name=self.node,
            restored=True,
            journal_id=entry.id,
            message=why,
            config_sha256=entry.original_sha256,
            health=health,
            restart_command_s=restart_s,
            total_s=time.monotonic() - t0,
        )
