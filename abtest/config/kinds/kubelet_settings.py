"""``kubelet_settings``: several KubeletConfiguration paths changed together, e.g. a client
throttle (``kubeAPIQPS`` and ``kubeAPIBurst``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from abtest.config.factor_levels import FactorValue, Scalar, Settings
from abtest.config.full_match import whole
from abtest.config.kinds.base import FactorKind
from abtest.config.kinds.config_field import FIELD_PATH
from abtest.config.kinds.levels import scalar_value
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor


class KubeletSettings(FactorKind):
    name = "kubelet_settings"

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        """on: and off: mappings of dotted path -> scalar, with the same keys."""
        on, off = _settings(f, "on"), _settings(f, "off")
        differ = sorted({p for p, _ in on} ^ {p for p, _ in off})
        if differ:
            raise f.error(
                "off",
                f"on and off must set the same paths; only one of them sets {', '.join(differ)}",
                "list every path in both, with its value in each",
            )
        # off is kept in on's order, so the two levels line up
        order = [p for p, _ in on]
        return on, tuple(sorted(off, key=lambda kv: order.index(kv[0])))

    def kubelet_settings(self, factor: Factor, on: bool) -> Settings:
        value = factor.value(on)
        assert isinstance(value, tuple)
        return value


def _settings(f: Fields, key: str) -> Settings:
    raw = f.data.get(key)
    if not isinstance(raw, dict) or not raw:
        raise f.error(
            key,
            "a kubelet_settings factor's value must be a non-empty mapping of "
            "KubeletConfiguration path -> value",
            "e.g. on: {kubeAPIQPS: 3, kubeAPIBurst: 10}",
        )
    pairs: list[tuple[str, Scalar]] = []
    for path, value in raw.items():
        if not isinstance(path, str) or not whole(FIELD_PATH, path):
            raise f.error(
                f"{key}.{path}",
                f"invalid KubeletConfiguration path {path!r}",
                "e.g. kubeAPIQPS or featureGates.Name",
            )
        v = scalar_value(f, f"{key}.{path}", value)
        if path.startswith("featureGates.") and not isinstance(v, bool):
            raise f.error(f"{key}.{path}", "a feature gate's value must be true or false")
        pairs.append((path, v))
    return tuple(pairs)


KIND = KubeletSettings()
