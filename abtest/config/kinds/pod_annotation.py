"""``pod_annotation``: one annotation every pod carries (``annotation:`` names its key)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from abtest.config.factor_levels import FactorValue, PodPart
from abtest.config.k8s_names import ANNOTATION_TODO, annotation_key_problem
from abtest.config.kinds.base import PodSpecKind
from abtest.config.kinds.levels import string
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor


class PodAnnotation(PodSpecKind):
    name = "pod_annotation"
    param = "annotation"

    def check_param(self, f: Fields, value: str) -> None:
        if problem := annotation_key_problem(value):
            raise f.error("annotation", problem, ANNOTATION_TODO)

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        return string(f, "on", "an annotation value"), string(f, "off", "an annotation value")

    def targets(self, factor: Factor) -> tuple[str, ...]:
        return (f"pod:annotations/{factor.param}",)

    def pod_part(self, factor: Factor, on: bool) -> PodPart:
        return ((f"pod.annotations.{factor.param}", str(factor.value(on))),)


KIND = PodAnnotation()
