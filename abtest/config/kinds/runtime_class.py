"""``runtime_class``: the pods' RuntimeClass (``spec.runtimeClassName``), e.g. runc vs crun."""

from __future__ import annotations

from typing import TYPE_CHECKING

from abtest.config.factor_levels import FactorValue, PodPart
from abtest.config.k8s_names import RUNTIME_CLASS_TODO, runtime_class_problem
from abtest.config.kinds.base import PodSpecKind
from abtest.config.kinds.levels import required
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor


class RuntimeClass(PodSpecKind):
    name = "runtime_class"

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        return _name(f, "on"), _name(f, "off")

    def targets(self, factor: Factor) -> tuple[str, ...]:
        return ("pod:runtimeClassName",)

    def pod_part(self, factor: Factor, on: bool) -> PodPart:
        return (("pod.runtimeClassName", str(factor.value(on))),)


def _name(f: Fields, key: str) -> str:
    value = required(f, key)
    if problem := runtime_class_problem(value):
        raise f.error(key, problem, RUNTIME_CLASS_TODO)
    assert isinstance(value, str)
    return value


KIND = RuntimeClass()
