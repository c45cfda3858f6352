"""``pod_field``: one top-level field of the pod spec with a scalar value (``field:`` names
it), e.g. ``automountServiceAccountToken`` or ``enableServiceLinks``. The field must be one the
pod spec has (a typo is refused naming the nearest field, never an arm identical to the
baseline), of a scalar type (``containers`` or ``affinity`` cannot take a scalar), and both
levels must be of that type (abtest.config.pod_spec)."""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from abtest.config.factor_levels import FactorValue, PodPart
from abtest.config.full_match import whole
from abtest.config.kinds.base import PodSpecKind
from abtest.config.kinds.levels import scalar
from abtest.config.pod_spec import POD_SPEC_FIELDS, SCALAR_TYPES
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor

FIELD_NAME = re.compile(r"[a-z][A-Za-z0-9]{0,62}")
# Fields the tool owns or another kind proves: the pods are pinned to the node under test by
# the default scheduler (its time is inside the measurement), and a runtime_class factor
# checks that the node runs the RuntimeClass's handler.
NOT_YOURS = {
    "nodeName": "pods are pinned to the node under test through the default scheduler",
    "schedulerName": "pods are pinned to the node under test through the default scheduler",
    "runtimeClassName": "use a runtime_class factor: it checks the node runs the handler",
}


class PodField(PodSpecKind):
    name = "pod_field"
    param = "field"

    def check_param(self, f: Fields, field: str) -> None:
        if not whole(FIELD_NAME, field):
            raise f.error(
                "field",
                f"invalid pod spec field {field!r}",
                "a top-level field of the pod spec, e.g. automountServiceAccountToken",
            )
        if field in NOT_YOURS:
            raise f.error("field", f"a factor cannot set spec.{field}", NOT_YOURS[field])
        kind = POD_SPEC_FIELDS.get(field)
        if kind is None:
            near = difflib.get_close_matches(field, list(POD_SPEC_FIELDS), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}?" if near else "see `kubectl explain pod.spec`"
            raise f.error("field", f"the pod spec has no field {field!r}", hint)
        if kind not in SCALAR_TYPES:
            raise f.error(
                "field",
                f"spec.{field} is a {kind}, not a scalar: a pod_field factor sets a bool, "
                "int or string field",
                "use a pod template (workload.template) for structured fields",
            )

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        on, off = scalar(f, "on"), scalar(f, "off")
        kind = POD_SPEC_FIELDS.get(str(f.data.get("field")), "")
        allowed = SCALAR_TYPES.get(kind)
        for key, value in (("on", on), ("off", off)):
            if allowed is not None and not (
                isinstance(value, allowed) and not (bool not in allowed and isinstance(value, bool))
            ):
                raise f.error(
                    key,
                    f"spec.{f.data.get('field')} is a {kind}, got {type(value).__name__} {value!r}",
                    f"give a {kind} value",
                )
        return on, off

    def targets(self, factor: Factor) -> tuple[str, ...]:
        return (f"pod:{factor.param}",)

    def pod_part(self, factor: Factor, on: bool) -> PodPart:
        value = factor.value(on)
        assert value is not None and not isinstance(value, tuple)
        return ((f"pod.{factor.param}", value),)


KIND = PodField()
