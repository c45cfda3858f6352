"""A round's start at a random phase of the kubelet's periodic loops (issue 46).

The kubelet's PLEG relists every second; a small batch is ready on the relist after its work.
When a run's rounds start at much the same phase of that tick (the sweep's steps take much the
same time each round), every round's batch time is the work rounded up to the same tick: a
change in work shows as nothing, or as a whole tick, and no analysis can tell how much work
changed (docs/statistics.md, "The start phase"). Waiting a uniform 0..width before the first
create makes the phase uniform whatever the kubelet's own phase is, as long as the width is a
whole number of the loop's periods; the measured span starts at the first create, so the wait
is not in any figure, only in the gap before the round (its part ``start_dither``).
"""

from __future__ import annotations

import random

from abtest.process import stop as stopping

# not seeded: a round's delay must not depend on anything its arm could (os entropy)
_RANDOM = random.SystemRandom()


def wait_random_phase(width_s: float) -> float:
    """Sleep a uniform 0..``width_s`` seconds (a stop request ends it early); returns it."""
    delay = _RANDOM.uniform(0.0, width_s) if width_s > 0 else 0.0
    if delay > 0:
        stopping.sleep(delay)
    return delay
