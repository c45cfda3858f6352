"""Factor catalogs (gates/*.yaml): load and check."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from abtest.config import datafiles
from abtest.config.domain import (
    NODE_KUBELET,
    POD_SPEC_KINDS,
    Catalog,
    Factor,
    FactorKind,
    FactorValue,
    Scalar,
    parse_release,
)
from abtest.config.k8s_names import (
    ANNOTATION_TODO,
    RUNTIME_CLASS_TODO,
    annotation_key_problem,
    runtime_class_problem,
)
from abtest.config.numbers import MAX_FACTORS, SETTING
from abtest.config.yaml_checks import Fields, load_yaml_mapping
from abtest.errors import UserError

GATE_NAME = re.compile(r"^[A-Za-z0-9]+$")
FIELD_PATH = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*$")
# Names of factors that are not one kubelet path: they only name arms (``+crun``).
FACTOR_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
SAFE_NODE_PATH = re.compile(r"/[A-Za-z0-9._/+-]+")
_YAML11_KEYS = {True: "on", False: "off"}
KINDS: dict[str, FactorKind] = {
    "feature_gate": "feature_gate",
    "config_field": "config_field",
    "kubelet_settings": "kubelet_settings",
    "runtime_class": "runtime_class",
    "pod_annotation": "pod_annotation",
    "kubelet_build": "kubelet_build",
}
_KEYS = {"name", "kind", "component", "on", "off", "summary", "availability", "expected_effect"}


def load_catalog(name_or_path: str) -> Catalog:
    """Load a catalog by shipped name (``agc``, ``lab``) or by path."""
    path = datafiles.resolve("gates", name_or_path)
    return parse_catalog(path)


def _yaml11(data: dict[Any, Any]) -> dict[Any, Any]:
    # YAML 1.1 reads a bare `on:` / `off:` key as the booleans true / false.
    return {_YAML11_KEYS.get(k, k) if isinstance(k, bool) else k: v for k, v in data.items()}


def parse_catalog(path: Path) -> Catalog:
    top = Fields(load_yaml_mapping(path), path)
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
    if kind_text not in KINDS:
        raise f.error("kind", f"unknown kind {kind_text!r}", "use one of " + ", ".join(KINDS))
    kind = KINDS[kind_text]
    f.only(_KEYS | {"annotation"} if kind == "pod_annotation" else _KEYS)
    name = f.text("name", required=True)
    annotation: str | None = None
    on: FactorValue
    off: FactorValue
    if kind == "kubelet_settings":
        _check_name(f, name)
        on, off = _settings_pair(f)
    elif kind == "runtime_class":
        _check_name(f, name)
        on, off = _runtime_class(f, "on"), _runtime_class(f, "off")
    elif kind == "pod_annotation":
        _check_name(f, name)
        annotation = _annotation_key(f)
        on, off = _string(f, "on"), _string(f, "off")
    elif kind == "kubelet_build":
        _check_name(f, name)
        on, off = _kubelet_build(f, "on"), _kubelet_build(f, "off")
    elif kind == "feature_gate":
        if not GATE_NAME.match(name):
            raise f.error("name", f"invalid feature gate name {name!r}", "use [A-Za-z0-9]+")
        on, off = _gate_level(f, "on"), _gate_level(f, "off")
    else:
        on, off = _scalar(f, "on"), _scalar(f, "off")
        if not FIELD_PATH.match(name):
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
        component=f.text("component", default="pod" if kind in POD_SPEC_KINDS else "kubelet"),
        availability=f.text("availability", default="upstream"),
        expected_effect=f.text("expected_effect", default="unknown"),
        annotation=annotation,
    )


def _gate_level(f: Fields, key: str) -> bool | None:
    """true, false, or null: the gate left unset (the binary's default), e.g. so that a
    kubelet build that predates the gate can run the arm."""
    if key not in f.data:
        raise f.error(key, "missing required key", "true, false, or null (leave the gate unset)")
    value = f.data[key]
    if value is not None and not isinstance(value, bool):
        raise f.error(
            key,
            f"a feature gate's on/off values must be true or false, got {value!r}",
            "or null: leave the gate unset (the kubelet's default)",
        )
    return value


def _kubelet_build(f: Fields, key: str) -> str:
    """``node`` (the node's own kubelet), a release the lab builds (``v1.35.4``: the file
    ``<kubelet.builds_dir>/v1.35.4/kubelet`` on the node), or an absolute path on the node."""
    if key not in f.data:
        raise f.error(key, "missing required key")
    value = f.data[key]
    todo = "node (the node's own kubelet), a release such as v1.35.4, or an absolute path"
    if not isinstance(value, str) or not value:
        raise f.error(key, f"a kubelet build must be a string, got {value!r}", todo)
    if value == NODE_KUBELET:
        return value
    if value.startswith("/"):
        if not SAFE_NODE_PATH.fullmatch(value) or "/../" in value or value.endswith("/.."):
            raise f.error(key, f"invalid path on the node {value!r}", "letters, digits, . _ / + -")
        return value
    return parse_release(value, f.where(key)).version


def _check_name(f: Fields, name: str) -> None:
    if not FACTOR_NAME.match(name):
        raise f.error("name", f"invalid factor name {name!r}", "use letters, digits, _ . -")


def _scalar(f: Fields, key: str) -> Scalar:
    if key not in f.data:
        raise f.error(key, "missing required key")
    return _scalar_value(f, key, f.data[key])


def _scalar_value(f: Fields, key: str, value: object) -> Scalar:
    if not isinstance(value, bool | int | float | str):
        raise f.error(key, f"expected a scalar (bool, number, string), got {type(value).__name__}")
    if isinstance(value, str) and any(ch in value for ch in "\n\r\x00"):
        raise f.error(key, "control characters are not allowed in values")
    # NaN would even pass the on == off check (NaN != NaN)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if numeric and (problem := SETTING.problem(value)):
        raise f.error(key, problem, "give a finite number")
    return value


def _string(f: Fields, key: str) -> str:
    """An annotation value: Kubernetes annotations are strings, and YAML's `true` or `5` would
    reach the API as something else, so they must be quoted."""
    if key not in f.data:
        raise f.error(key, "missing required key")
    value = f.data[key]
    if not isinstance(value, str):
        raise f.error(
            key,
            f"an annotation value must be a string, got {type(value).__name__} {value!r}",
            f'quote it, e.g. {key}: "{value}"',
        )
    return value


def _runtime_class(f: Fields, key: str) -> str:
    if key not in f.data:
        raise f.error(key, "missing required key")
    value = f.data[key]
    if problem := runtime_class_problem(value):
        raise f.error(key, problem, RUNTIME_CLASS_TODO)
    assert isinstance(value, str)
    return value


def _annotation_key(f: Fields) -> str:
    key = f.text("annotation", required=True)
    if problem := annotation_key_problem(key):
        raise f.error("annotation", problem, ANNOTATION_TODO)
    return key


def _settings_pair(f: Fields) -> tuple[FactorValue, FactorValue]:
    """on: and off: of a kubelet_settings factor: mappings of dotted path -> scalar, same keys."""
    levels = []
    for key in ("on", "off"):
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
            if not isinstance(path, str) or not FIELD_PATH.match(path):
                raise f.error(
                    f"{key}.{path}",
                    f"invalid KubeletConfiguration path {path!r}",
                    "e.g. kubeAPIQPS or featureGates.Name",
                )
            v = _scalar_value(f, f"{key}.{path}", value)
            if path.startswith("featureGates.") and not isinstance(v, bool):
                raise f.error(f"{key}.{path}", "a feature gate's value must be true or false")
            pairs.append((path, v))
        levels.append(tuple(pairs))
    on, off = levels
    differ = sorted({p for p, _ in on} ^ {p for p, _ in off})
    if differ:
        raise f.error(
            "off",
            f"on and off must set the same paths; only one of them sets {', '.join(differ)}",
            "list every path in both, with its value in each",
        )
    order = [p for p, _ in on]
    return on, tuple(sorted(off, key=lambda kv: order.index(kv[0])))


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
