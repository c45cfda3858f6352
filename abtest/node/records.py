"""What an apply or a restore did, as plain records (for the CLI, the sweep and the store)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from abtest.config.domain import Scalar
from abtest.errors import ApplyFailed, Interrupted, NodeError
from abtest.node.health import HealthReport


class RestartTimes:
    """The health stages of the restart an apply or a restore made: None without a restart
    (an apply found already in effect keeps only the values it compared, ``verified``)."""

    health: HealthReport | None

    @property
    def restart_to_healthz_s(self) -> float | None:
        return self.health.healthz_s if self.health else None

    @property
    def restart_to_ready_s(self) -> float | None:
        return self.health.ready_s if self.health else None

    @property
    def restart_to_verified_s(self) -> float | None:
        return self.health.verified_s if self.health else None

    @property
    def verified(self) -> dict[str, dict[str, Any]]:
        return self.health.verified if self.health else {}

    def health_dict(self) -> dict[str, Any]:
        return (self.health or HealthReport()).as_dict()


@dataclass
class ApplyRecord(RestartTimes):
    """One apply. Times are seconds from sending the restart command to each stage."""

    node_name: str
    settings: dict[str, Scalar]
    journal_id: int | None
    changed: bool  # the config file's bytes changed
    restarted: bool
    diff: str
    original_sha256: str
    config_sha256: str
    before: dict[str, Scalar | None] = field(default_factory=dict)
    health: HealthReport | None = None
    restart_command_s: float | None = None
    total_s: float = 0.0
    messages: list[str] = field(default_factory=list)
    restore: RestoreRecord | None = None  # filled by `applied()` on exit

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node_name,
            "settings": self.settings,
            "journal_id": self.journal_id,
            "changed": self.changed,
            "restarted": self.restarted,
            "original_sha256": self.original_sha256,
            "config_sha256": self.config_sha256,
            "before": self.before,
            "restart_command_s": _r(self.restart_command_s),
            "total_s": _r(self.total_s),
            "diff": self.diff,
            "messages": self.messages,
        }
        out.update(self.health_dict())
        if self.restore is not None:
            out["restore"] = self.restore.as_dict()
        return out


@dataclass
class RestoreRecord(RestartTimes):
    node_name: str
    restored: bool
    journal_id: int | None
    message: str
    config_sha256: str | None = None
    health: HealthReport | None = None
    restart_command_s: float | None = None
    total_s: float = 0.0
    messages: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node_name,
            "restored": self.restored,
            "journal_id": self.journal_id,
            "message": self.message,
            "config_sha256": self.config_sha256,
            "restart_command_s": _r(self.restart_command_s),
            "total_s": _r(self.total_s),
            "messages": self.messages,
        }
        out.update(self.health_dict())
        return out


class RolledBack(ApplyFailed):
    """The apply failed and the node was rolled back to its original config (healthy)."""

    def __init__(self, message: str, stage: str | None, rollback: RestoreRecord, log_tail: str):
        super().__init__(message)
        self.stage = stage  # the health stage that failed, if it was one
        self.rollback = rollback
        self.log_tail = log_tail


def describe_settings(settings: Mapping[str, Scalar]) -> str:
    def show(v: Scalar) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    return ", ".join(f"{p}={show(v)}" for p, v in settings.items()) or "(nothing)"


def reason_of(exc: BaseException) -> str:
    """Why an apply stopped, in one line for the journal and the user."""
    if isinstance(exc, Interrupted):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, NodeError) else str(exc)


def text_of(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise NodeError(f"{where}: the kubelet config is not UTF-8 text") from None


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
