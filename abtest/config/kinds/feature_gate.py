"""``feature_gate``: one kubelet feature gate, true, false, or null (left unset)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from abtest.config.factor_levels import FactorValue, Settings
from abtest.config.kinds.base import FactorKind
from abtest.config.kinds.levels import required
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor

GATE_NAME = re.compile(r"[A-Za-z0-9]+")


class FeatureGate(FactorKind):
    name = "feature_gate"
    name_rule = (GATE_NAME, "invalid feature gate name", "use [A-Za-z0-9]+")

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        return _level(f, "on"), _level(f, "off")

    def kubelet_path(self, factor: Factor) -> str:
        return f"featureGates.{factor.name}"

    def kubelet_settings(self, factor: Factor, on: bool) -> Settings:
        value = factor.value(on)
        # a level of None leaves the gate unset, so a build that predates it can run the arm
        if value is None:
            return ()
        assert not isinstance(value, tuple)
        return ((self.kubelet_path(factor), value),)


def _level(f: Fields, key: str) -> bool | None:
    """true, false, or null: the gate left unset (the binary's default), e.g. so that a
    kubelet build that predates the gate can run the arm."""
    value = required(f, key, "true, false, or null (leave the gate unset)")
    if value is not None and not isinstance(value, bool):
        raise f.error(
            key,
            f"a feature gate's on/off values must be true or false, got {value!r}",
            "or null: leave the gate unset (the kubelet's default)",
        )
    return value


KIND = FeatureGate()
