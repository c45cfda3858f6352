"""The run order of a sweep: randomized complete blocks. Pure, no I/O.

Each block visits every arm once, in a seeded random order. At a visit the node is
configured once (one kubelet restart), an optional warm-up round runs (discarded by the
analysis), then every batch size runs once, sizes in a seeded random order. Drift over the
sweep hits every arm alike, and the block is the pairing unit for the statistics.

Determinism: the shuffles use our own Fisher-Yates over ``random.Random(seed).getrandbits``
(the Mersenne Twister stream for an int seed is fixed across Python versions and machines;
``random.shuffle``'s use of it is an implementation detail we do not depend on).

A schedule is per node. Several nodes run the same schedule side by side (the node is then
another block factor); nothing here assumes one node, and ``done`` sets for :func:`remaining`
are per node.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TypeVar

from abtest.config.domain import Arm, by_name
from abtest.errors import UserError

T = TypeVar("T")

#: What identifies a finished round for resume: (block, arm name, size, warm-up?).
RoundKey = tuple[int, str, int, bool]


@dataclass(frozen=True)
class Visit:
    """One arm's turn in one block: configure the node once, then run its rounds."""

    block: int  # 0-based block number
    position: int  # 0-based position of this visit within its block
    index: int  # 0-based index of this visit in the whole schedule
    arm: str  # arm name
    sizes: tuple[int, ...]  # batch sizes in the order they run at this visit
    warmup: bool  # a warm-up round runs first at this visit

    @property
    def warmup_size(self) -> int:
        """The warm-up round's size: the smallest size (cheapest, still exercises the path)."""
        return min(self.sizes)


@dataclass(frozen=True)
class RoundSlot:
    """One round to run: a batch of ``size`` pods on ``arm`` at one visit."""

    block: int
    visit_index: int  # Visit.index of the visit this round belongs to
    arm: str
    size: int
    ordinal: int  # 0-based position of this round in the whole schedule
    warmup: bool  # a warm-up round, run and stored but left out of the analysis

    @property
    def key(self) -> RoundKey:
        return (self.block, self.arm, self.size, self.warmup)


@dataclass(frozen=True)
class Schedule:
    arms: tuple[Arm, ...]
    sizes: tuple[int, ...]  # as given (the per-visit order is in each Visit)
    blocks: int
    seed: int
    warmup: bool
    visits: tuple[Visit, ...]
    slots: tuple[RoundSlot, ...]

    def arm(self, name: str) -> Arm:
        return by_name(self.arms, name)

    @property
    def measured_rounds(self) -> int:
        return sum(1 for s in self.slots if not s.warmup)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description (for ``abtest plan --json`` and the run record)."""
        return {
            "seed": self.seed,
            "blocks": self.blocks,
            "sizes": list(self.sizes),
            "warmup": self.warmup,
            "arms": [
                {"name": a.name, "on": sorted(a.on), "settings": dict(a.settings)}
                for a in self.arms
            ],
            "visits": [
                {
                    "block": v.block,
                    "position": v.position,
                    "arm": v.arm,
                    "sizes": list(v.sizes),
                    "warmup": v.warmup,
                }
                for v in self.visits
            ],
            "restarts": restarts(self),
            "rounds": len(self.slots),
            "measured_rounds": self.measured_rounds,
        }


def _randbelow(rng: random.Random, n: int) -> int:
    """A uniform int in [0, n) by rejection sampling on getrandbits (stable everywhere)."""
    bits = n.bit_length()
    while True:
        r = rng.getrandbits(bits)
        if r < n:
            return r


def shuffled(items: Sequence[T], rng: random.Random) -> list[T]:
    """A Fisher-Yates shuffled copy of ``items``."""
    out = list(items)
    for i in range(len(out) - 1, 0, -1):
        j = _randbelow(rng, i + 1)
        out[i], out[j] = out[j], out[i]
    return out


def _check(arms: Sequence[Arm], sizes: Sequence[int], blocks: int, seed: int) -> None:
    where = "schedule"
    if not arms:
        raise UserError("no arms to schedule", where=where, todo="give at least one arm")
    names = [a.name for a in arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"arm names are not unique: {dup}", where=where)
    if not sizes:
        raise UserError("no batch sizes", where=where, todo="give --sizes, e.g. --sizes 50,100")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise UserError(f"batch size {s!r} is not a positive integer", where=where)
    if len(set(sizes)) != len(sizes):
        raise UserError(f"batch sizes repeat: {list(sizes)}", where=where, todo="list each once")
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise UserError(f"blocks (rounds) must be >= 1, got {blocks!r}", where=where)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}", where=where)


def build_schedule(
    arms: Sequence[Arm], sizes: Sequence[int], blocks: int, seed: int, warmup: bool
) -> Schedule:
    """The randomized complete block schedule; the same inputs give the same schedule."""
    _check(arms, sizes, blocks, seed)
    rng = random.Random(seed)
    names = [a.name for a in arms]
    visits: list[Visit] = []
    slots: list[RoundSlot] = []
    for block in range(blocks):
        for position, name in enumerate(shuffled(names, rng)):
            visit = Visit(
                block=block,
                position=position,
                index=len(visits),
                arm=name,
                sizes=tuple(shuffled(sizes, rng)),
                warmup=warmup,
            )
            visits.append(visit)
            if warmup:
                slots.append(
                    RoundSlot(block, visit.index, name, visit.warmup_size, len(slots), True)
                )
            for size in visit.sizes:
                slots.append(RoundSlot(block, visit.index, name, size, len(slots), False))
    return Schedule(
        arms=tuple(arms),
        sizes=tuple(sizes),
        blocks=blocks,
        seed=seed,
        warmup=warmup,
        visits=tuple(visits),
        slots=tuple(slots),
    )


def remaining(schedule: Schedule, done: Set[RoundKey]) -> list[RoundSlot]:
    """The rounds still to run, in schedule order, given the keys of finished rounds.

    A visit whose measured rounds are all done is skipped whole. A visit with some measured
    rounds left is configured again on resume (a fresh kubelet restart), so its warm-up
    round, if the schedule has warm-ups, is run again even if it had been done.
    A key that is not in the schedule means ``done`` belongs to another schedule: UserError.
    """
    known = {s.key for s in schedule.slots}
    stray = sorted(k for k in done if k not in known)
    if stray:
        raise UserError(
            f"{len(stray)} finished round(s) are not in this schedule, e.g. {stray[0]}",
            where="resume",
            todo="resume with the run's own arms, sizes, blocks, seed and warm-up setting",
        )
    out: list[RoundSlot] = []
    by_visit: dict[int, list[RoundSlot]] = {}
    for s in schedule.slots:
        by_visit.setdefault(s.visit_index, []).append(s)
    for visit in schedule.visits:
        vslots = by_visit[visit.index]
        if all(s.key in done for s in vslots if not s.warmup):
            continue
        out.extend(s for s in vslots if s.warmup or s.key not in done)
    return out


def restarts(schedule: Schedule, slots: Sequence[RoundSlot] | None = None) -> int:
    """Config applies (kubelet restarts): one per visit that has rounds in ``slots``
    (default: the whole schedule)."""
    if slots is None:
        return len(schedule.visits)
    return len({s.visit_index for s in slots})


def estimate_seconds(
    schedule: Schedule,
    restart_s: float,
    batch_s_by_size: Mapping[int, float],
    cleanup_s: float,
    slots: Sequence[RoundSlot] | None = None,
) -> float:
    """Estimated wall time: a restart (apply + verify) per visit, plus per round its batch
    time and the cleanup after it. ``slots`` limits it to some rounds, e.g. the
    :func:`remaining` ones for an ETA."""
    chosen = schedule.slots if slots is None else tuple(slots)
    for name, value in (("restart_s", restart_s), ("cleanup_s", cleanup_s)):
        if value < 0:
            raise UserError(f"{name} must be >= 0, got {value}", where="estimate")
    missing = sorted({s.size for s in chosen} - set(batch_s_by_size))
    if missing:
        raise UserError(
            f"no batch time for size(s) {missing}",
            where="estimate",
            todo="give a batch time for every size in the schedule",
        )
    total = restarts(schedule, chosen) * restart_s
    for s in chosen:
        total += batch_s_by_size[s.size] + cleanup_s
    return total
