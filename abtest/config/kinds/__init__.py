"""The factor kinds: every module of this package that defines ``KIND`` is one, found here
(so adding a kind is adding its module). See ``base.FactorKind`` for what a kind answers."""

from __future__ import annotations

import importlib
import pkgutil

from abtest.config.kinds.base import FactorKind

__all__ = ["FactorKind", "kind", "names"]

_NOT_KINDS = frozenset({"base", "levels"})


def _discover() -> dict[str, FactorKind]:
    found: dict[str, FactorKind] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _NOT_KINDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "KIND", None)
        if not isinstance(spec, FactorKind):
            raise TypeError(f"{module.__name__} defines no KIND (a FactorKind)")
        if spec.name in found:
            raise TypeError(f"two modules define the factor kind {spec.name!r}")
        found[spec.name] = spec
    return found


_KINDS = _discover()


def names() -> tuple[str, ...]:
    """Every kind's catalog name, sorted."""
    return tuple(_KINDS)


def kind(name: str) -> FactorKind:
    """The kind named ``name``; KeyError for a name no module defines."""
    return _KINDS[name]
