"""Round acceptance of the reference method (pure).

A round is accepted only if every pod of the batch reached Ready, no container restarted and
no pod went Ready -> NotReady while we watched (up to the end of the observation window).
``FailedCreatePodSandBox`` events are counted either way and never decide acceptance. A round
that fails is kept with the reasons, never dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from abtest.batch.round_records import PodRecord, Verdict

MAX_NAMES = 5


def _names(pods: Sequence[PodRecord]) -> str:
    names = [p.name for p in pods[:MAX_NAMES]]
    more = len(pods) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _tally(values: Sequence[str]) -> str:
    return ", ".join(f"{v} x{n}" for v, n in Counter(values).most_common())


def judge(
    pods: Sequence[PodRecord], size: int, *, timed_out: bool = False, timeout_s: float | None = None
) -> Verdict:
    reasons: list[str] = []
    if len(pods) != size:
        reasons.append(f"{len(pods)} pod records for a batch of {size}")
    failed = [p for p in pods if not p.created]
    if failed:
        statuses = [f"HTTP {p.http_status}" if p.http_status else "no answer" for p in failed]
        reasons.append(f"{len(failed)} create request(s) failed ({_tally(statuses)})")
    not_ready = [p for p in pods if p.created and p.ready_s is None]
    if not_ready:
        text = f"{len(not_ready)} of {size} pods never Ready"
        if timed_out:
            text += f" within the {timeout_s:g} s timeout" if timeout_s else " before the timeout"
        waiting = [p.waiting_reason for p in not_ready if p.waiting_reason]
        if waiting:
            text += f" (waiting: {_tally(waiting)})"
        reasons.append(f"{text}: {_names(not_ready)}")
    restarted = [p for p in pods if p.restarts > 0]
    if restarted:
        total = sum(p.restarts for p in restarted)
        reasons.append(f"{total} container restart(s): {_names(restarted)}")
    regressed = [p for p in pods if p.ready_regressed > 0]
    if regressed:
        total = sum(p.ready_regressed for p in regressed)
        reasons.append(f"{total} Ready->NotReady regression(s): {_names(regressed)}")
    return Verdict(accepted=not reasons, reasons=tuple(reasons))
