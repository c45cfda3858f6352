"""Is the restarted kubelet healthy, and running what we asked for?

Three stages, timed from the moment the restart command was sent, one deadline for all:

1. ``healthz``  - the kubelet's healthz endpoint answers ``ok`` on the node (via SSH,
   ``curl`` or ``wget``; through a pod, the kubelet's ``/healthz`` via the node proxy).
   With a profile ``status_command`` (SSH only), a kubelet that is not running (e.g.
   refused its config) fails the stage at once instead of at the deadline.
2. ``ready``    - the node is Ready in the API with a heartbeat newer than the restart. The
   heartbeat is stamped by the node's clock, so it is compared only with the node's own
   clock read at the restart (:func:`node_clock`) and with the heartbeat seen before the
   restart - never with this machine's clock, which may be seconds off.
3. ``verified`` - every expected value is confirmed from the running kubelet: ``/configz``
   for fields and explicitly set gates, and the ``kubernetes_feature_enabled`` metric for
   gates (both through the API server's node proxy).

Comparison helpers are pure and unit-tested.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from abtest.cluster.client import Cluster, node_proxy_get
from abtest.cluster.nodes import configz, feature_enabled, lease_renewed, node_status
from abtest.config.domain import Scalar
from abtest.config.full_match import whole
from abtest.config.playbook import NodeProfile
from abtest.errors import ClusterError, NodeError
from abtest.node.kubelet_config import MAP_FIELDS, parse_config, read_setting, split_path
from abtest.node.session import NodeSession
from abtest.process.stop import sleep
from abtest.store.journal import JournalEntry

DEFAULT_HEALTHZ_PORT = 10248
POLL_S = 0.25
_URL_RE = re.compile(r"https?://[A-Za-z0-9.\-_\[\]:]+(/[A-Za-z0-9._~/\-]*)?")
_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_CLOCK_RE = re.compile(r"\s*(\d+)(\.\d+)?")  # busybox date prints "%N" literally
HEARTBEAT_SLACK_S = 1.0  # heartbeats have one-second resolution
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MISSING = object()


@dataclass(frozen=True)
class Expectation:
    """A value the running kubelet must show. ``explicit``: the config file sets it, so
    ``/configz`` lists it (a gate left at its default appears only in the metric)."""

    path: str
    value: Scalar
    explicit: bool = True


@dataclass
class HealthReport:
    healthz_s: float | None = None
    ready_s: float | None = None
    verified_s: float | None = None
    kubelet_version: str = ""
    verified: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "restart_to_healthz_s": _round(self.healthz_s),
            "restart_to_ready_s": _round(self.ready_s),
            "restart_to_verified_s": _round(self.verified_s),
            "kubelet_version": self.kubelet_version,
            "verified": self.verified,
            "messages": self.messages,
        }

    def timings(self) -> str:
        """The three stages' times, for the progress line of a verified restart."""
        return (
            f"healthz {self.healthz_s:.2f} s, Ready {self.ready_s:.2f} s, "
            f"verified {self.verified_s:.2f} s after the restart"
        )


class HealthFailed(NodeError):
    """A health stage did not pass before the deadline."""

    def __init__(self, stage: str, message: str, report: HealthReport) -> None:
        self.stage = stage
        self.report = report
        super().__init__(f"{stage}: {message}")


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# --------------------------------------------------------------------------- pure helpers


def healthz_url(profile: NodeProfile, config_text: str) -> str:
    """The profile's healthz URL, ``{healthz_port}`` filled from the config (default 10248)."""
    url = profile.healthz_url
    if "{healthz_port}" in url:
        port = parse_config(config_text).get("healthzPort") or DEFAULT_HEALTHZ_PORT
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise NodeError(f"kubelet config healthzPort {port!r} is not a port number")
        url = url.replace("{healthz_port}", str(port))
    if not whole(_URL_RE, url):
        raise NodeError(f"healthz URL {url!r} does not look like http(s)://host:port/path")
    return url


def healthz_command(url: str, timeout_s: int = 5) -> list[str]:
    """An argv that prints the healthz body with curl, wget or busybox wget, whichever exists."""
    q = shlex.quote(url)
    script = (
        "if command -v curl >/dev/null 2>&1; then "
        f"exec curl -fsS -m {timeout_s} {q}; "
        "elif command -v wget >/dev/null 2>&1; then "
        f"exec wget -q -O - -T {timeout_s} {q}; "
        f"else exec busybox wget -q -O - -T {timeout_s} {q}; fi"
    )
    return ["sh", "-c", script]


def parse_clock(text: str) -> float | None:
    """Unix seconds from ``date +%s.%N`` output (None if it is not that)."""
    m = _CLOCK_RE.match(text)
    if not m:
        return None
    return float(m.group(1) + (m.group(2) or ""))


def heartbeat_fresh(
    heartbeat: float | None, *, node_restart_wall: float | None, heartbeat_before: float | None
) -> bool | None:
    """Whether ``heartbeat`` was written after the restart, judged on the node's clock only:
    newer than the node's clock at the restart (within the heartbeat's 1 s resolution) and
    newer than the heartbeat seen before it. None when neither reference is known."""
    if heartbeat is None:
        return False
    if node_restart_wall is None and heartbeat_before is None:
        return None
    if node_restart_wall is not None and heartbeat <= node_restart_wall - HEARTBEAT_SLACK_S:
        return False
    return heartbeat_before is None or heartbeat > heartbeat_before


def same_second_restart(
    heartbeat: float | None,
    *,
    node_restart_wall: float | None,
    heartbeat_before: float | None,
    lease_renewed: Callable[[], float | None],
) -> bool:
    """A restart right after another one (a rollback just after an apply's restart): the new
    kubelet's heartbeat can fall in the same second as the previous kubelet's, so the 1 s
    heartbeat cannot tell them apart. Then the node Lease decides: renewed (microseconds, the
    node's clock) after the restart means the new kubelet reports to the API server."""
    if heartbeat is None or heartbeat_before is None or node_restart_wall is None:
        return False
    if heartbeat != heartbeat_before or heartbeat <= node_restart_wall - 2 * HEARTBEAT_SLACK_S:
        return False  # an older heartbeat: the new kubelet will write a newer second
    renewed = lease_renewed()  # asked only in this narrow case
    return renewed is not None and renewed > node_restart_wall


def go_duration_seconds(text: str) -> float | None:
    """Seconds in a Go duration ("1m30s", "500ms", "0s"); None if ``text`` is not one."""
    s = text.strip()
    if not s:
        return None
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total if pos == len(s) and pos > 0 else None


def values_match(expected: Any, actual: Any) -> bool:
    """Whether the running kubelet's ``actual`` value is the ``expected`` setting."""
    if actual is MISSING:
        return False
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return math.isclose(float(expected), float(actual), rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, str) and isinstance(actual, str):
        if expected == actual:
            return True
        a, b = go_duration_seconds(expected), go_duration_seconds(actual)
        return a is not None and b is not None and math.isclose(a, b)
    return bool(expected == actual)


def configz_value(config: Mapping[str, Any], path: str) -> Any:
    """The value at a settings path in a ``/configz`` kubeletconfig, or MISSING."""
    node: Any = config
    for seg in split_path(path):
        if not isinstance(node, Mapping) or seg not in node:
            return MISSING
        node = node[seg]
    return node


def compare(
    expectations: list[Expectation],
    config: Mapping[str, Any],
    gates: Mapping[str, bool],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """What the running kubelet shows for each expectation, and every mismatch as a message."""
    seen: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for exp in expectations:
        running = configz_value(config, exp.path)
        row: dict[str, Any] = {
            "expected": exp.value,
            "configz": None if running is MISSING else running,
        }
        if exp.path.startswith("featureGates."):
            gate = exp.path.split(".", 1)[1]
            metric = gates.get(gate)
            row["metric"] = metric
            if metric is None and not exp.explicit and running is MISSING:
                # back as the original file left it (unset), on a kubelet build that does not
                # have the gate at all (an older release as an arm): nothing to be in effect
                row["absent"] = True
            elif metric is None:
                problems.append(f"{exp.path}: gate not in kubernetes_feature_enabled")
            elif metric is not exp.value:
                problems.append(f"{exp.path}: metric says {metric}, expected {exp.value}")
            if exp.explicit and not values_match(exp.value, running):
                problems.append(f"{exp.path}: /configz has {row['configz']}, expected {exp.value}")
            elif not exp.explicit and running is not MISSING and running is not exp.value:
                problems.append(f"{exp.path}: /configz has {running}, expected {exp.value}")
        elif not values_match(exp.value, running):
            problems.append(f"{exp.path}: /configz has {row['configz']!r}, expected {exp.value!r}")
        seen[exp.path] = row
    return seen, problems


def running_values(
    paths: list[str], config: Mapping[str, Any], gates: Mapping[str, bool]
) -> dict[str, Scalar | None]:
    """The effective value of each path now (gates from the metric, fields from /configz)."""
    out: dict[str, Scalar | None] = {}
    for path in paths:
        if path.startswith("featureGates."):
            out[path] = gates.get(path.split(".", 1)[1])
        else:
            value = configz_value(config, path)
            out[path] = value if isinstance(value, bool | int | float | str) else None
    return out


def unknown_paths(
    paths: list[str], config: Mapping[str, Any], gates: Mapping[str, bool]
) -> list[str]:
    """Paths this kubelet does not know: a gate absent from the metric, a field absent
    from /configz (for the free-form maps, only the map itself must exist)."""
    unknown = []
    for path in paths:
        head, _, rest = path.partition(".")
        if head == "featureGates":
            if rest not in gates:
                unknown.append(path)
        elif head in MAP_FIELDS:
            if head not in config:
                unknown.append(path)
        elif configz_value(config, path) is MISSING:
            unknown.append(path)
    return unknown


def restore_expectations(entry: JournalEntry, original_text: str) -> list[Expectation]:
    """What the kubelet must show once the original is back: the original file's value
    where it sets one, else the running value recorded before the first apply."""
    paths = entry.applied.get("paths") or list(entry.applied.get("settings", {}))
    return original_expectations(paths, original_text, entry.applied.get("before", {}))


def original_expectations(
    paths: list[str], original_text: str, before: Mapping[str, Any]
) -> list[Expectation]:
    """Expectations for ``paths`` being back at their original values."""
    out = []
    for path in paths:
        value = read_setting(original_text, path)
        if value is not None:
            out.append(Expectation(path, value, explicit=True))
        elif before.get(path) is not None:
            out.append(Expectation(path, before[path], explicit=False))
    return out


# --------------------------------------------------------------------------- waiting


def node_clock(session: NodeSession) -> float | None:
    """The node's own clock (unix seconds), None if it cannot be read."""
    try:
        res = session.ssh.run(["date", "+%s.%N"], timeout=15)
    except NodeError:
        return None
    return parse_clock(res.stdout) if res.ok else None


@dataclass(frozen=True)
class BeforeRestart:
    """What the stages are judged against, read *before* the restart command is sent: the
    healthz URL, the Ready heartbeat the API server has now and the node's own clock
    (:func:`node_clock`; the heartbeat is stamped by that clock, never judged by ours).
    None where it could not be read."""

    url: str
    heartbeat: float | None
    node_wall: float | None

    @classmethod
    def read(
        cls, session: NodeSession, cluster: Cluster, profile: NodeProfile, config_text: str
    ) -> BeforeRestart:
        url = healthz_url(profile, config_text)
        try:
            hb = node_status(cluster, profile.node_name).heartbeat
            heartbeat = hb.timestamp() if hb else None
        except ClusterError:
            heartbeat = None
        return cls(url, heartbeat, node_clock(session))


class HealthWaiter:
    """Waits for the three stages after one restart."""

    def __init__(self, session: NodeSession, cluster: Cluster, profile: NodeProfile) -> None:
        self.session = session
        self.cluster = cluster
        self.profile = profile

    def healthz_ok(self, url: str) -> bool:
        if self.profile.pod is not None:
            # through a pod, the API server is the only judge (an exec may answer from a
            # kubelet about to go): the kubelet's own /healthz through the node proxy
            try:
                return node_proxy_get(self.cluster, self.profile.node_name, "healthz") == "ok"
            except ClusterError:
                return False
        try:
            res = self.session.ssh.run(healthz_command(url), timeout=15)
        except NodeError:
            return False
        return res.ok and res.stdout.strip() == "ok"

    def kubelet_running(self) -> bool | None:
        """None when the profile cannot tell (no status_command, or a pod transport: no exec
        reaches a node whose kubelet is down)."""
        if not self.profile.status_command or self.profile.pod is not None:
            return None
        try:
            return self.session.profile_command(self.profile.status_command, timeout=15).ok
        except NodeError:
            return None

    def wait(
        self,
        expectations: list[Expectation],
        before: BeforeRestart,
        *,
        restarted_mono: float,
        timeout: float,
    ) -> HealthReport:
        """``before``: read just before the restart command was sent; ``restarted_mono``:
        this machine's monotonic clock when it was sent."""
        report = HealthReport()
        deadline = restarted_mono + timeout
        self._healthz(before.url, report, restarted_mono, timeout)
        report.healthz_s = time.monotonic() - restarted_mono
        self._until("ready", deadline, report, lambda: self._not_ready(before, report))
        report.ready_s = time.monotonic() - restarted_mono
        self._until("verified", deadline, report, lambda: self._unverified(expectations, report))
        report.verified_s = time.monotonic() - restarted_mono
        return report

    def _healthz(
        self, url: str, report: HealthReport, restarted_mono: float, timeout: float
    ) -> None:
        """1. healthz says ok; a kubelet seen not running twice (past its first 2 s) fails at
        once rather than at the deadline."""
        not_running = 0
        while not self.healthz_ok(url):
            if time.monotonic() - restarted_mono > 2.0 and self.kubelet_running() is False:
                not_running += 1
                if not_running >= 2:
                    raise HealthFailed("healthz", "the kubelet is not running", report)
            else:
                not_running = 0
            if time.monotonic() >= restarted_mono + timeout:
                raise HealthFailed("healthz", f"no 'ok' from {url} within {timeout:.0f} s", report)
            sleep(POLL_S)  # ends early on SIGINT/SIGTERM (abtest.process.stop)

    def _until(
        self, stage: str, deadline: float, report: HealthReport, problem: Callable[[], str | None]
    ) -> None:
        """Poll until ``problem()`` is None; HealthFailed with the last one at the deadline."""
        while (last := problem()) is not None:
            if time.monotonic() >= deadline:
                raise HealthFailed(stage, last, report)
            sleep(POLL_S)  # ends early on SIGINT/SIGTERM (abtest.process.stop)

    def _not_ready(self, before: BeforeRestart, report: HealthReport) -> str | None:
        """2. None once the node is Ready with a heartbeat newer than the restart (heartbeats
        have 1 s resolution); else why not yet."""
        node = self.profile.node_name
        try:
            st = node_status(self.cluster, node)
            report.kubelet_version = st.kubelet_version
            hb = st.heartbeat.timestamp() if st.heartbeat else None
            fresh = heartbeat_fresh(
                hb, node_restart_wall=before.node_wall, heartbeat_before=before.heartbeat
            )
            if st.ready and fresh is None:
                report.messages.append(
                    "heartbeat freshness not checked: neither the node's clock nor a "
                    "heartbeat from before the restart could be read"
                )
                return None
            if st.ready and fresh:
                return None
            if st.ready and same_second_restart(
                hb,
                node_restart_wall=before.node_wall,
                heartbeat_before=before.heartbeat,
                lease_renewed=lambda: lease_renewed(self.cluster, node),
            ):
                report.messages.append(
                    "heartbeat in the same second as the previous kubelet's; the node "
                    "Lease was renewed after the restart"
                )
                return None
            why = (
                f"Ready={st.ready} ({st.reason}: {st.message})"
                if not st.ready
                else f"heartbeat {st.heartbeat} is not newer than the restart"
            )
        except ClusterError as exc:
            why = str(exc)
        return f"node {node}: {why}"

    def _unverified(self, expectations: list[Expectation], report: HealthReport) -> str | None:
        """3. None once the running kubelet shows every intended value; else what differs."""
        try:
            config = configz(self.cluster, self.profile.node_name)
            gates = feature_enabled(self.cluster, self.profile.node_name)
            report.verified, problems = compare(expectations, config, gates)
        except ClusterError as exc:
            problems = [str(exc)]
        return "; ".join(problems) if problems else None
