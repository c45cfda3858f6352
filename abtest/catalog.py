"""Factor catalogs (gates/*.yaml): load and check."""

from __future__ import annotations

import re
from pathlib import Path

from abtest import datafiles
from abtest.domain import Catalog, Factor, FactorKind, Scalar
from abtest.errors import UserError
from abtest.schema import Fields, load_yaml_mapping

GATE_NAME = re.compile(r"^[A-Za-z0-9]+$")
FIELD_PATH = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*$")
_YAML11_KEYS = {True: "on", False: "off"}
KINDS: dict[str, FactorKind] = {"feature_gate": "feature_gate", "config_field": "config_field"}


def load_catalog(name_or_path: str) -> Catalog:
    """Load a catalog by shipped name (``agc``, ``lab``) or by path."""
    path = datafiles.resolve("gates", name_or_path)
    return parse_catalog(path)


def parse_catalog(path: Path) -> Catalog:
    top = Fields(load_yaml_mapping(path), path)
    top.only({"catalog", "description", "factors"})
    factors: list[Factor] = []
    seen: set[str] = set()
    for f in top.list_of_maps("factors"):
        # YAML 1.1 reads a bare `on:` / `off:` key as the booleans true / false.
        f.data = {
            _YAML11_KEYS.get(k, k) if isinstance(k, bool) else k: v for k, v in f.data.items()
        }
        factor = _parse_factor(f)
        if factor.name in seen:
            raise f.error("name", f"duplicate factor {factor.name!r}", "names must be unique")
        seen.add(factor.name)
        factors.append(factor)
    return Catalog(
        name=top.text("catalog", required=True),
        source=str(path),
        description=" ".join(top.text("description", default="").split()),
        factors=tuple(factors),
    )


def _parse_factor(f: Fields) -> Factor:
    f.only({"name", "kind", "component", "on", "off", "summary", "availability", "expected_effect"})
    name = f.text("name", required=True)
    kind_text = f.text("kind", required=True)
    if kind_text not in KINDS:
        raise f.error("kind", f"unknown kind {kind_text!r}", "use feature_gate or config_field")
    kind = KINDS[kind_text]
    on = _scalar(f, "on")
    off = _scalar(f, "off")
    if kind == "feature_gate":
        if not GATE_NAME.match(name):
            raise f.error("name", f"invalid feature gate name {name!r}", "use [A-Za-z0-9]+")
        if not isinstance(on, bool) or not isinstance(off, bool):
            raise f.error("on", "a feature gate's on/off values must be true or false")
    elif not FIELD_PATH.match(name):
        raise f.error(
            "name", f"invalid KubeletConfiguration field path {name!r}", "e.g. kubeAPIQPS"
        )
    if on == off:
        raise f.error("on", "on and off values are the same", "a factor must change something")
    return Factor(
        name=name,
        kind=kind,
        on=on,
        off=off,
        summary=" ".join(f.text("summary", required=True).split()),
        component=f.text("component", default="kubelet"),
        availability=f.text("availability", default="upstream"),
        expected_effect=f.text("expected_effect", default="unknown"),
    )


def _scalar(f: Fields, key: str) -> Scalar:
    if key not in f.data:
        raise f.error(key, "missing required key")
    value = f.data[key]
    if not isinstance(value, bool | int | float | str):
        raise f.error(key, f"expected a scalar (bool, number, string), got {type(value).__name__}")
    if isinstance(value, str) and any(ch in value for ch in "\n\r\x00"):
        raise f.error(key, "control characters are not allowed in values")
    return value


def select_factors(catalog: Catalog, names: list[str]) -> tuple[Factor, ...]:
    """Limit a catalog to the named factors (all when names is empty)."""
    if not names:
        return catalog.factors
    known = {f.name: f for f in catalog.factors}
    for n in names:
        if n not in known:
            raise UserError(
                f"unknown factor {n!r}",
                catalog.source,
                f"known factors: {', '.join(known)}",
            )
    return tuple(known[n] for n in names)
