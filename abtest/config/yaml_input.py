"""The one YAML loader for everything a user hands us (catalogs, playbooks, node profiles,
kubeconfigs): strict UTF-8, a size cap, duplicate keys refused naming both lines, and limits on
nesting depth and on what aliases expand to (an alias bomb would otherwise exhaust memory long
after loading "succeeded", and its error text would print the whole value).

Every problem is one :class:`ConfigError` with the file and line; its text never quotes the
document (a kubeconfig line may hold a bearer token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from abtest.config.paths import read_input
from abtest.errors import ConfigError

MAX_BYTES = 2_000_000  # the largest shipped file is a few KB; a kubeconfig with CAs ~ 50 KB
MAX_DEPTH = 50  # far deeper than any real document, far below Python's recursion limit
MAX_NODES = 200_000  # nodes after expanding every alias


class _Limited(yaml.SafeLoader):
    """SafeLoader that counts nodes as aliases expand them, bounds nesting depth and refuses
    duplicate mapping keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.expanded = 0
        self.anchor_sizes: dict[str, int] = {}

    def _count(self, n: int, mark: Any) -> None:
        self.expanded += n
        if self.expanded > MAX_NODES:
            raise _TooBig(f"more than {MAX_NODES} values once aliases are expanded", mark)

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            self._count(self.anchor_sizes.get(str(event.anchor), 1), event.start_mark)
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _TooBig(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        start = self.expanded
        self._count(1, event.start_mark)
        anchor = getattr(event, "anchor", None)
        node = super().compose_node(parent, index)
        if anchor is not None:
            self.anchor_sizes[str(anchor)] = self.expanded - start
        self.depth -= 1
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            try:
                seen = first.get(key)
            except TypeError:
                continue
            line = key_node.start_mark.line + 1
            if seen is not None:
                # as written: YAML 1.1 reads a bare `on:` as True
                raise _Duplicate(str(key_node.value)[:80], seen, line)
            first[key] = line
        return super().construct_mapping(node, deep=deep)


class _TooBig(Exception):
    def __init__(self, what: str, mark: Any) -> None:
        super().__init__(what)
        self.what = what
        self.line = mark.line + 1 if mark is not None else None


class _Duplicate(Exception):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


def read_text(path: Path, what: str = "file") -> str:
    """A user's text file: a regular file (abtest.config.paths.read_input: never a FIFO, a
    device or a folder), at most MAX_BYTES, UTF-8."""
    data = read_input(
        path,
        str(path),
        f"give a {what}: a regular file of at most {MAX_BYTES} bytes",
        MAX_BYTES,
        ConfigError,
    )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            f"{path}:{line}",
            "save the file as UTF-8",
        ) from None


def parse_yaml(text: str, where: str) -> Any:
    """One YAML document, under the limits above; ConfigError naming ``where`` and the line."""
    loader: _Limited | None = None
    try:
        loader = _Limited(text)  # the reader refuses NUL and other control characters here
        return loader.get_single_data()
    except _Duplicate as exc:
        raise ConfigError(
            f"key {exc.key!r} is given twice (lines {exc.first} and {exc.second})",
            f"{where}:{exc.second}",
            "keep one of them",
        ) from None
    except _TooBig as exc:
        raise ConfigError(
            exc.what,
            f"{where}:{exc.line}" if exc.line else where,
            "write the values out; aliases and deep nesting are limited",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        spot = f"{where}:{mark.line + 1}" if mark is not None else where
        # only the parser's own words: str(exc) would quote the offending line
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"malformed YAML: {problem}", spot, "fix the YAML syntax") from None
    except RecursionError:
        raise ConfigError(
            "nested too deeply", where, "write the values out; deep nesting is limited"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml_file(path: Path, what: str = "file") -> Any:
    return parse_yaml(read_text(path, what), str(path))
