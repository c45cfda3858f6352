"""Plain dataclasses for the domain: what a factor, an arm and a setting are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FactorKind = Literal["feature_gate", "config_field"]
Scalar = bool | int | float | str


@dataclass(frozen=True)
class Factor:
    """A named change to the node: a kubelet feature gate or a KubeletConfiguration field."""

    name: str
    kind: FactorKind
    on: Scalar
    off: Scalar
    summary: str
    component: str = "kubelet"
    availability: str = "upstream"
    expected_effect: str = "unknown"

    @property
    def path(self) -> str:
        """The dotted KubeletConfiguration path this factor sets."""
        return f"featureGates.{self.name}" if self.kind == "feature_gate" else self.name


@dataclass(frozen=True)
class Catalog:
    name: str
    source: str
    description: str
    factors: tuple[Factor, ...]

    def get(self, name: str) -> Factor:
        for f in self.factors:
            if f.name == name:
                return f
        raise KeyError(name)


@dataclass(frozen=True)
class Arm:
    """One configuration of the node: which factors are on. Every other factor is off."""

    name: str
    on: frozenset[str]
    settings: tuple[tuple[str, Scalar], ...] = field(default=())
    # A kubelet binary (a file on the node) installed for this arm; None: the node's own.
    kubelet_binary: str | None = None

    def settings_dict(self) -> dict[str, Scalar]:
        return dict(self.settings)
