"""A fake node whose kubelet builds differ in speed, for the bisect tests: :class:`SteppedKit` is
a :class:`abtest.testing.FakeKit` whose rounds take ``base`` seconds (with noise) on every build
before ``culprit`` in ``order`` and ``base * (1 + step)`` from it on; :class:`FakeBuilder`
checks builds as the lab does (the skew policy under a v1.36.3 control plane) and records what it
places."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from abtest.batch.round_records import RoundResult
from abtest.batch.spec import RoundSpec
from abtest.config.domain import Release, build_version_of, skew_problem
from abtest.config.kubelet_series import BuildName, load_series
from abtest.config.playbook import load_profile
from abtest.errors import UserError
from abtest.testing import FakeKit, FakeNode, fake_profiles, fake_round

CONTROL_PLANE = Release(1, 36, 3)


class SteppedKit(FakeKit):
    def __init__(
        self,
        node: FakeNode,
        order: Sequence[str],
        culprit: str | None,
        step: float,
        base: float = 2.0,
        noise: float = 0.02,
        seed: int = 1,
    ) -> None:
        super().__init__(node)
        self.order, self.step, self.base, self.noise = list(order), step, base, noise
        self.culprit = None if culprit is None else self.order.index(culprit)
        self.rng = np.random.default_rng(seed)

    def seconds(self, binary: str | None) -> float:
        build = build_version_of(binary or "") or "v1.36.3"
        slow = self.culprit is not None and self.order.index(build) >= self.culprit
        return float(
            self.base * (1 + self.step if slow else 1) * np.exp(self.rng.normal(0, self.noise))
        )

    def run_round(self, cluster: Any, spec: RoundSpec) -> RoundResult:
        node = self.nodes[spec.node_name]
        node.record(f"round {spec.size}", "round")
        assert spec.generator is not None
        return fake_round(
            spec.node_name, spec.namespace, spec.size, spec.generator, self.seconds(node.binary)
        )


@dataclasses.dataclass
class FakeBuilder:
    placed: list[str] = dataclasses.field(default_factory=list)
    checked: list[str] = dataclasses.field(default_factory=list)

    def check(self, builds: Sequence[BuildName]) -> None:
        for b in builds:
            problem = skew_problem(b.release, CONTROL_PLANE)
            if problem:
                raise UserError(problem, f"kubelet build {b}")
            if b.series:
                load_series(b)
            self.checked.append(b.name)

    def place(self, builds: Sequence[BuildName], say: Any) -> None:
        self.placed += [b.name for b in builds]


def lab_nodes(node: FakeNode) -> tuple[Any, ...]:
    return fake_profiles(load_profile("lab"), [node])
