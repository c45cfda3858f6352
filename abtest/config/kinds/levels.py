"""Reading a factor's on/off levels from a catalog entry: the checks several kinds share."""

from __future__ import annotations

from abtest.config.factor_levels import Scalar
from abtest.config.numbers import SETTING
from abtest.config.yaml_checks import Fields


def required(f: Fields, key: str, todo: str | None = None) -> object:
    if key not in f.data:
        raise f.error(key, "missing required key", todo)
    return f.data[key]


def scalar(f: Fields, key: str) -> Scalar:
    return scalar_value(f, key, required(f, key))


def scalar_value(f: Fields, key: str, value: object) -> Scalar:
    if not isinstance(value, bool | int | float | str):
        raise f.error(key, f"expected a scalar (bool, number, string), got {type(value).__name__}")
    if isinstance(value, str) and any(ch in value for ch in "\n\r\x00"):
        raise f.error(key, "control characters are not allowed in values")
    # NaN would even pass the on == off check (NaN != NaN)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if numeric and (problem := SETTING.problem(value)):
        raise f.error(key, problem, "give a finite number")
    return value


def string(f: Fields, key: str, what: str) -> str:
    """A value Kubernetes keeps as a string: YAML's `true` or `5` would reach the API as
    something else, so they must be quoted."""
    value = required(f, key)
    if not isinstance(value, str):
        raise f.error(
            key,
            f"{what} must be a string, got {type(value).__name__} {value!r}",
            f'quote it, e.g. {key}: "{value}"',
        )
    return value
