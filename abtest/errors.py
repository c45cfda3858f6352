"""One exception hierarchy, and the reasons a number is refused.

``UserError`` and its children are problems with what the user gave us (a file, a flag,
a node that is not in the state we need): the CLI prints them as one line and exits 2.
Every other ``AbtestError`` is an operational failure (a node, the cluster, the lab): one line
with its class name, and its own ``exit_code`` (4 for those below). An exception that is not an
``AbtestError`` is a bug: ``abtest.cli.main`` lets it through with its traceback.

``TOO_SMALL`` and ``NO_VARIATION`` are the two reasons ``abtest.stats`` gives for a
comparison without an interval (in a note, never as an exception). They live here, beneath
every layer, so the renderers in ``abtest.report`` can name them without importing stats.
"""

from __future__ import annotations

import signal

# Why a comparison has no interval: stats writes them into its notes, report shortens them.
TOO_SMALL = "n too small for an interval"
NO_VARIATION = "no variation between rounds (no interval)"


class AbtestError(Exception):
    """Base of every error abtest raises on purpose."""

    exit_code = 1


class UserError(AbtestError):
    """Bad input: says what is wrong, where, and what to do."""

    exit_code = 2

    def __init__(self, what: str, where: str | None = None, todo: str | None = None) -> None:
        self.what = what
        self.where = where
        self.todo = todo
        super().__init__(self.one_line())

    def lines(self) -> list[str]:
        """What the CLI prints, one ``abtest: error:`` line each."""
        return [self.one_line()]

    def one_line(self) -> str:
        parts = []
        if self.where:
            parts.append(f"{self.where}: ")
        parts.append(self.what)
        if self.todo:
            parts.append(f" ({self.todo})")
        return "".join(parts)


class InputRefused(UserError):
    """A file refused for several reasons, each its own line naming where and what (an export
    file's bad values: ``FILE: runs[0].rounds[3].batch_ready_s: must be a number``)."""

    def __init__(self, where: str, problems: list[str], todo: str) -> None:
        self.problems = problems
        super().__init__(f"{problems[0]}" if problems else "refused", where, todo)

    def lines(self) -> list[str]:
        last = len(self.problems) - 1
        return [
            f"{self.where}: {p}" + (f" ({self.todo})" if i == last and self.todo else "")
            for i, p in enumerate(self.problems)
        ]


class ConfigError(UserError):
    """A catalog, playbook or profile file that does not load or validate."""


class NodeError(AbtestError):
    """Something on the node went wrong (SSH, kubelet, health). Not the user's input."""

    exit_code = 4


class SSHConfigMissing(ConfigError, NodeError):
    """The ssh config a profile names does not exist: the user's input (exit 2, one line), and
    still a failure to reach the node for the code that catches NodeError around connecting."""


class HostKeyError(NodeError):
    """The node's SSH host key is unknown or changed."""


class NodeLockedError(NodeError):
    """Another experiment holds the node lock."""


class ApplyFailed(NodeError):
    """A config change did not become healthy; the node was rolled back."""


class ClusterError(AbtestError):
    """The API server answered with an error (converted by ``abtest.cluster.client``)."""

    exit_code = 4


class LabError(AbtestError):
    """The local lab could not be brought up or down."""

    exit_code = 4


class StoreError(AbtestError):
    """The results database cannot be used: its URL does not parse, its server cannot be
    reached, or the connection was lost mid-run. Operational, like a node failure."""

    exit_code = 4


class StoreConnectionLost(StoreError):
    """The connection to a shared (PostgreSQL) results database broke. The statement or round
    in flight was rolled back; the next statement reconnects (so the node restore and the
    run's "failed" row can still be written), and ``--resume`` continues the run."""


class StoreConflict(StoreError):
    """A row with the same key is already stored (e.g. a run id another controller took)."""


# Not an AbtestError: like KeyboardInterrupt it is no failure of ours, and a bare
# `except AbtestError` must not swallow it. Raised by abtest.process.stop.
class Interrupted(BaseException):  # named like KeyboardInterrupt, on purpose
    """The process got SIGINT or SIGTERM."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
