"""``config_field``: one KubeletConfiguration field (its dotted path is the factor's name)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from abtest.config.factor_levels import FactorValue, Settings
from abtest.config.kinds.base import FactorKind
from abtest.config.kinds.levels import scalar
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor

FIELD_PATH = re.compile(r"[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*")


class ConfigField(FactorKind):
    name = "config_field"
    name_rule = (FIELD_PATH, "invalid KubeletConfiguration field path", "e.g. kubeAPIQPS")

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        return scalar(f, "on"), scalar(f, "off")

    def kubelet_path(self, factor: Factor) -> str:
        return factor.name

    def kubelet_settings(self, factor: Factor, on: bool) -> Settings:
        value = factor.value(on)
        assert value is not None and not isinstance(value, tuple)
        return ((factor.name, value),)


KIND = ConfigField()
