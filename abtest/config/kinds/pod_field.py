"""``pod_field``: one top-level field of the pod spec with a scalar value (``field:`` names
it), e.g. ``automountServiceAccountToken`` or ``enableServiceLinks``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from abtest.config.domain import FactorValue, PodPart
from abtest.config.kinds.base import FactorKind
from abtest.config.kinds.levels import scalar
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.domain import Factor

FIELD_NAME = re.compile(r"^[a-z][A-Za-z0-9]{0,62}$")
# Fields the tool owns or another kind proves: the pods are pinned to the node under test by
# the default scheduler (its time is inside the measurement), and a runtime_class factor
# checks that the node runs the RuntimeClass's handler.
NOT_YOURS = {
    "nodeName": "pods are pinned to the node under test through the default scheduler",
    "schedulerName": "pods are pinned to the node under test through the default scheduler",
    "runtimeClassName": "use a runtime_class factor: it checks the node runs the handler",
}


class PodField(FactorKind):
    name = "pod_field"
    param = "field"
    component = "pod"
    pod_spec = True

    def read_param(self, f: Fields) -> str:
        field = f.text("field", required=True)
        if not FIELD_NAME.match(field):
            raise f.error(
                "field",
                f"invalid pod spec field {field!r}",
                "a top-level field of the pod spec, e.g. automountServiceAccountToken",
            )
        if field in NOT_YOURS:
            raise f.error("field", f"a factor cannot set spec.{field}", NOT_YOURS[field])
        return field

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        return scalar(f, "on"), scalar(f, "off")

    def targets(self, factor: Factor) -> tuple[str, ...]:
        return (f"pod:{factor.param}",)

    def pod_part(self, factor: Factor, on: bool) -> PodPart:
        value = factor.value(on)
        assert value is not None and not isinstance(value, tuple)
        return ((f"pod.{factor.param}", value),)


KIND = PodField()
