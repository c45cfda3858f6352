"""What a user asks of a sweep on the command line (or a program, as the command does): the
flags that override a playbook. :mod:`abtest.engine.sweep_plan` turns them into a plan."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlanOptions:
    """What the user asked for; None means "as the playbook says"."""

    playbook: str = "lab-sweep"
    profiles: tuple[str, ...] = ()
    catalog: str | None = None
    factors: tuple[str, ...] = ()
    design: str | None = None  # gates-all | attribution | factorial | baseline | singles ...
    attribution: bool = False
    rounds: int | None = None
    sizes: tuple[int, ...] | None = None
    seed: int | None = None
    qps: float | None = None
    concurrency: int | None = None
    namespace: str | None = None
    warmup: bool | None = None
    #: every arm runs this kubelet build (``v1.36.3+agc``, placed in the profile's
    #: kubelet.builds_dir) instead of the node's own binary; None: the node's own
    kubelet_build: str | None = None
