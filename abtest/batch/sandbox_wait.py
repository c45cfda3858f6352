"""The node side of a round's cleanup: poll the node's sandbox count back to its pre-round
value, removing the tool's sandboxes at each poll (abtest.batch.round.cleanup calls it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from abtest.errors import NodeError

# Sandbox-count polling. The node has no event stream for "sandbox stopped" through the
# profile's commands, so the count is polled; each poll is already a few SSH round trips
# (~0.07 s each on the lab), so the pauses between polls are short. After a failed removal
# the pause grows up to the cap.
POLL_IDLE_S = 0.1
POLL_AFTER_REMOVAL_S = 0.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0


@dataclass
class NodeSide:
    """Counters of the node-side wait, for the parts and the notes."""

    polls: int = 0
    removed: int = 0
    command_s: float = 0.0
    failures: int = 0
    last_error: str | None = None


def wait_sandboxes(
    node: NodeSide,
    sandbox_count: Callable[[], int],
    baseline: int,
    reap_sandboxes: Callable[[], int] | None,
    clock: Callable[[], float],
    pause: Callable[[float], None],
    deadline: float,
) -> tuple[int, bool, str | None]:
    """Poll the node's sandbox count down to ``baseline``, removing the tool's stopped
    sandboxes at each poll: (last count, at baseline?, what was left if not)."""

    def timed(fn: Callable[[], int]) -> int:
        t = clock()
        try:
            return fn()
        finally:
            node.command_s += clock() - t

    backoff = BACKOFF_FIRST_S
    count = timed(sandbox_count)
    node.polls += 1
    while count > baseline:
        if clock() > deadline:
            return count, False, f"node has {count} pod sandboxes"
        # The kubelet stops a deleted pod's sandbox a moment after the API forgets the pod;
        # each poll removes the ones stopped so far.
        removed = 0
        if reap_sandboxes is not None:
            try:
                removed = timed(reap_sandboxes)
            except NodeError as exc:
                node.failures += 1
                node.last_error = str(exc)
                pause(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                count = timed(sandbox_count)
                node.polls += 1
                continue
        node.removed += removed
        backoff = BACKOFF_FIRST_S
        pause(POLL_AFTER_REMOVAL_S if removed else POLL_IDLE_S)
        count = timed(sandbox_count)
        node.polls += 1
    return count, True, None
