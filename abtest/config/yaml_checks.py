"""Strict checks for the YAML documents users write (catalogs, playbooks, node profiles).

Every problem becomes one ConfigError naming the file, the field and what to do, and
nothing else happens: callers load and check before they touch anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from abtest.config.numbers import Range
from abtest.config.yaml_input import parse_yaml, read_text
from abtest.errors import ConfigError, UserError


def load_yaml_mapping(path: Path, what: str = "file") -> dict[str, Any]:
    """A user's YAML file through the one strict loader (abtest.config.yaml_input), as a mapping."""
    return yaml_mapping(read_text(path, what), path)


def yaml_mapping(text: str, path: Path) -> dict[str, Any]:
    """The text of ``path`` (read once, by :func:`read_text`) as a YAML mapping."""
    data = parse_yaml(text, str(path))
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", str(path), "see the shipped files")
    return data


# what every number is checked against when its field names no narrower range
_ANY_INT = Range(-(2**63 - 1), 2**63 - 1, integer=True)
_ANY_NUMBER = Range(-1e300, 1e300)


class Fields:
    """Reads typed fields out of one mapping, reporting problems with file and dotted path."""

    def __init__(self, data: Mapping[str, Any], path: Path, prefix: str = "") -> None:
        self.data = data
        self.path = path
        self.prefix = prefix

    def where(self, key: str) -> str:
        return f"{self.path}: {self.prefix}{key}"

    def error(self, key: str, what: str, todo: str | None = None) -> ConfigError:
        return ConfigError(what, self.where(key), todo)

    def only(self, allowed: set[str]) -> None:
        unknown = sorted(set(self.data) - allowed)
        if unknown:
            raise self.error(
                unknown[0], "unknown key", f"allowed keys here: {', '.join(sorted(allowed))}"
            )

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.error(key, "missing required key")
            return None
        return self.data[key]

    def text(self, key: str, default: str | None = None, required: bool = False) -> str:
        value = self._get(key, required and default is None)
        if value is None:
            return default if default is not None else ""
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {type(value).__name__}")
        return value

    def command(self, key: str, default: str | None = None) -> str | None:
        """A shell command run on the node: when given, not empty (an empty restart command
        would "restart" nothing and every health check would judge the old kubelet)."""
        value = self.opt_text(key)
        if value is None:
            return default
        if not value.strip():
            raise self.error(key, "is empty", "give the command, or remove the key")
        if any(ch in value for ch in "\x00\r"):
            raise self.error(key, "contains a NUL or carriage return", "write the command plainly")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self._get(key, False)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {type(value).__name__}")
        return value

    def integer(
        self,
        key: str,
        default: int | None = None,
        minimum: int | None = None,
        rng: Range | None = None,
    ) -> int:
        value = self._get(key, default is None)
        if value is None:
            assert default is not None
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {type(value).__name__}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        self._in(key, value, rng or _ANY_INT)
        return value

    def number(
        self,
        key: str,
        default: float | None = None,
        minimum: float | None = None,
        rng: Range | None = None,
    ) -> float:
        """A finite number (NaN and infinities are refused everywhere), in ``rng`` if given."""
        value = self._get(key, default is None)
        if value is None:
            assert default is not None
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {type(value).__name__}")
        self._in(key, value, _ANY_NUMBER)
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        if rng is not None:
            self._in(key, value, rng)
        return float(value)

    def _in(self, key: str, value: object, rng: Range) -> None:
        try:
            rng.check(value, self.where(key))
        except UserError as exc:
            raise self.error(key, exc.what, exc.todo) from None

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {type(value).__name__}")
        return value

    def int_list(
        self,
        key: str,
        default: list[int] | None = None,
        minimum: int = 1,
        rng: Range | None = None,
    ) -> list[int]:
        value = self._get(key, default is None)
        if value is None:
            assert default is not None
            return list(default)
        if not isinstance(value, list) or not value:
            raise self.error(key, "expected a non-empty list of integers")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < minimum:
                raise self.error(key, f"expected integers >= {minimum}, got {_short(item)}")
            if rng is not None:
                self._in(key, item, rng)
        return list(value)

    def str_list(self, key: str, default: list[str] | None = None) -> list[str]:
        value = self._get(key, default is None)
        if value is None:
            assert default is not None
            return list(default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "expected a list of strings")
        return list(value)

    def str_map(self, key: str) -> dict[str, str]:
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self.error(key, "expected a mapping of strings to strings")
        return dict(value)

    def sub(self, key: str, required: bool = False) -> Fields:
        value = self._get(key, required)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise self.error(key, "expected a mapping")
        return Fields(value, self.path, f"{self.prefix}{key}.")

    def list_of_maps(self, key: str) -> list[Fields]:
        value = self._get(key, True)
        if not isinstance(value, list) or not value:
            raise self.error(key, "expected a non-empty list")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.error(f"{key}[{i}]", "expected a mapping")
            out.append(Fields(item, self.path, f"{self.prefix}{key}[{i}]."))
        return out


def _short(value: object) -> str:
    """A value in an error message, cut short: never the whole of a huge or nested value."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
