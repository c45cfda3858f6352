"""Factor catalogs (gates/*.yaml): load and check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abtest.config import datafiles, kinds
from abtest.config.domain import Catalog, Factor
from abtest.config.numbers import MAX_FACTORS
from abtest.config.yaml_checks import Fields, load_yaml_mapping
from abtest.errors import UserError

_YAML11_KEYS = {True: "on", False: "off"}
_KEYS = {"name", "kind", "component", "on", "off", "summary", "availability", "expected_effect"}


def load_catalog(name_or_path: str) -> Catalog:
    """Load a catalog by shipped name (``agc``, ``lab``) or by path."""
    path = datafiles.resolve("gates", name_or_path)
    return parse_catalog(path)


def _yaml11(data: dict[Any, Any]) -> dict[Any, Any]:
    # YAML 1.1 reads a bare `on:` / `off:` key as the booleans true / false.
    return {_YAML11_KEYS.get(k, k) if isinstance(k, bool) else k: v for k, v in data.items()}


def parse_catalog(path: Path) -> Catalog:
    top = Fields(load_yaml_mapping(path, "catalog"), path)
    top.only({"catalog", "description", "factors"})
    factors: list[Factor] = []
    seen: set[str] = set()
    listed = top.list_of_maps("factors")
    if len(listed) > MAX_FACTORS:
        raise top.error(
            "factors", f"{len(listed)} factors, more than {MAX_FACTORS}", "split the catalog"
        )
    for f in listed:
        f.data = _yaml11(dict(f.data))
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
    kind_text = f.text("kind", required=True)
    if kind_text not in kinds.names():
        raise f.error(
            "kind", f"unknown kind {kind_text!r}", "use one of " + ", ".join(kinds.names())
        )
    kind = kinds.kind(kind_text)
    f.only(_KEYS | {kind.param} if kind.param else _KEYS)
    name = f.text("name", required=True)
    kind.check_name(f, name)
    param = kind.read_param(f)
    on, off = kind.read_levels(f)
    if on == off:
        raise f.error("on", "on and off values are the same", "a factor must change something")
    return Factor(
        name=name,
        kind=kind.name,
        on=on,
        off=off,
        summary=" ".join(f.text("summary", required=True).split()),
        component=f.text("component", default=kind.component),
        availability=f.text("availability", default="upstream"),
        expected_effect=f.text("expected_effect", default="unknown"),
        param=param,
    )


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
