"""What one round is asked to do, as one value: the sweep, `abtest batch`, the fakes and the
tests hand a round this, so its parameters are written once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from abtest.config.playbook import Generator, Workload

Say = Callable[[str], None]


@dataclass(frozen=True)
class WatchOptions:
    """Knobs for tests: a short server timeout forces re-established watches; an old
    resourceVersion forces the 410 Gone re-list path."""

    server_timeout_s: int = 3600
    start_resource_version: str | None = None


@dataclass(frozen=True)
class RoundSpec:
    """One round on ``node_name``: ``size`` pods of ``workload`` in ``namespace``, submitted as
    ``generator`` says, stored under ``run_id``; the node's hooks for the cleanup and checks
    (:func:`abtest.batch.round.run_round` says what each does)."""

    node_name: str
    namespace: str
    size: int
    run_id: str
    workload: Workload | None = None
    generator: Generator | None = None
    sandbox_count: Callable[[], int] | None = None
    cleanup_timeout_s: float = 300.0
    scrape_metrics: bool = True
    say: Say | None = None
    watch_options: WatchOptions | None = None
    reap_sandboxes: Callable[[], int] | None = None
    clean_sandboxes: Callable[[str], int] | None = None
    verify: Callable[[str], str | None] | None = None
    # the runtime's start of each container in the namespace: pod UID -> unix ns
    # (NodeSession.container_starts with the namespace bound; None: not read)
    container_starts: Callable[[], dict[str, int] | None] | None = None
