"""What a factor kind is: one class that reads its levels from a catalog entry and says what
they change (kubelet settings, the pod, the kubelet build), so the loader, the arms and the pod
renderer ask the kind instead of knowing every kind by name.

A new kind is one module in this package that defines ``KIND``, an instance of a subclass of
``FactorKind``; ``abtest.config.kinds`` finds it (no list to extend elsewhere).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from abtest.config.factor_levels import FactorValue, PodPart, Settings
from abtest.config.full_match import whole
from abtest.config.yaml_checks import Fields

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor

# Names of factors that are not one kubelet path: they only name arms (``+crun``).
FACTOR_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


class FactorKind:
    """One kind of factor. Subclasses set ``name`` and override what their levels change;
    every default says "changes nothing of that sort"."""

    #: the catalog's ``kind:`` value
    name: ClassVar[str]
    #: the catalog key beyond the common ones this kind reads (pod_annotation: ``annotation``)
    param: ClassVar[str | None] = None
    #: what the factor changes, when the catalog does not say (``component:``)
    component: ClassVar[str] = "kubelet"
    #: True: it changes what the pods carry, so an arm needs no kubelet restart for it
    pod_spec: ClassVar[bool] = False
    #: False: factors of this kind share their target as levels of one choice (kubelet builds);
    #: the kind's ``check_design`` guards the choice instead
    exclusive: ClassVar[bool] = True
    #: what a factor's name must match, what one that does not is called, and the hint
    name_rule: ClassVar[tuple[re.Pattern[str], str, str]] = (
        FACTOR_NAME,
        "invalid factor name",
        "use letters, digits, _ . -",
    )

    def check_name(self, f: Fields, name: str) -> None:
        pattern, invalid, hint = self.name_rule
        if not whole(pattern, name):
            raise f.error("name", f"{invalid} {name!r}", hint)

    def read_param(self, f: Fields) -> str | None:
        """The value of the kind's own key (``param``): required text the kind checks."""
        if self.param is None:
            return None
        value = f.text(self.param, required=True)
        self.check_param(f, value)
        return value

    def check_param(self, f: Fields, value: str) -> None:
        """Refuse a ``param`` value the kind cannot use (raise ``f.error(self.param, ...)``)."""

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        raise NotImplementedError

    def targets(self, factor: Factor) -> tuple[str, ...]:
        """One name per thing the factor changes; two factors of a design must not share one."""
        return tuple(p for p, _ in self.kubelet_settings(factor, True))

    def kubelet_path(self, factor: Factor) -> str | None:
        """The one KubeletConfiguration path of a kind that has exactly one."""
        return None

    def kubelet_settings(self, factor: Factor, on: bool) -> Settings:
        return ()

    def pod_part(self, factor: Factor, on: bool) -> PodPart:
        return ()

    def kubelet_build(self, factor: Factor, on: bool) -> str | None:
        """The kubelet build this level runs (a release, a path, or ``node``), or None."""
        return None

    def check_design(
        self, design: str, factors: Sequence[Factor], ons: Sequence[frozenset[str]]
    ) -> None:
        """Refuse a design this kind cannot run (``ons``: each arm's turned-on factor names)."""


class PodSpecKind(FactorKind):
    """A kind that changes what the pods carry (a pod spec field, an annotation, the
    RuntimeClass): the pod is the component it changes, and an arm needs no kubelet restart."""

    component = "pod"
    pod_spec = True
