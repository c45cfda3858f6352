"""KubeletConfiguration text: read settings, change them, show the change. Pure, no I/O.

Settings are addressed by dotted paths: ``featureGates.X`` (a gate, bool), ``kubeAPIQPS``
(a field), ``logging.format`` (a nested field), ``evictionHard.memory.available`` (a key of
one of the kubelet's free-form maps, see :data:`MAP_FIELDS`: the rest of the path after the
map's name is one key, dots included).

Edits are surgical: the file is parsed with ruamel.yaml's round-trip composer for the exact
position of each value, only that value's characters are replaced (or one line per new key
is inserted), and every other byte - comments, order, quoting, blank lines - is left as it
was. Each result is re-parsed and checked to differ from the original in the requested
values only; anything else (anchors, aliases, odd layouts) is refused rather than guessed.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from abtest.config.domain import Scalar
from abtest.config.full_match import whole
from abtest.errors import ConfigError, UserError

KIND = "KubeletConfiguration"

#: KubeletConfiguration fields that are maps with free-form keys: name -> key pattern.
MAP_FIELDS: dict[str, re.Pattern[str]] = {
    "featureGates": re.compile(r"[A-Za-z0-9]+"),
    **{
        name: re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?")
        for name in (
            "evictionHard",
            "evictionSoft",
            "evictionSoftGracePeriod",
            "evictionMinimumReclaim",
            "systemReserved",
            "kubeReserved",
        )
    },
}
FIELD_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*")
GATE_RE = MAP_FIELDS["featureGates"]
#: Paths that identify the file rather than configure the kubelet.
PROTECTED = frozenset({"kind", "apiVersion"})

_SET_HELP = "use --set PATH=VALUE, e.g. --set featureGates.MyGate=true or --set kubeAPIQPS=5"


# --------------------------------------------------------------------------- validation


def split_path(path: str) -> tuple[str, ...]:
    """Validate a dotted settings path and split it into the keys it walks."""
    if not isinstance(path, str) or not path:
        raise UserError(f"empty or non-text setting path {path!r}", where="setting", todo=_SET_HELP)
    head, _, rest = path.partition(".")
    if head in MAP_FIELDS:
        key_re = MAP_FIELDS[head]
        if not rest or not whole(key_re, rest):
            what = "feature gate name" if head == "featureGates" else f"{head} key"
            raise UserError(
                f"invalid {what} {rest!r}",
                where=path,
                todo=f"{what}s must match {key_re.pattern}",
            )
        return (head, rest)
    segments = tuple(path.split("."))
    for seg in segments:
        if not whole(FIELD_RE, seg):
            raise UserError(
                f"invalid field path segment {seg!r}",
                where=path,
                todo=f"each dotted part must match {FIELD_RE.pattern}, e.g. kubeAPIQPS",
            )
    if segments[0] in PROTECTED:
        raise UserError(f"{segments[0]} cannot be changed", where=path, todo="set kubelet fields")
    return segments


def check_value(path: str, value: object) -> Scalar:
    """The value if it is a valid setting for ``path``; UserError otherwise."""
    if path.startswith("featureGates."):
        if not isinstance(value, bool):
            raise UserError(
                f"feature gate value must be true or false, got {value!r}",
                where=path,
                todo="use featureGates.NAME=true or =false",
            )
        return value
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UserError(f"value {value!r} is not a finite number", where=path)
        return value
    if isinstance(value, str):
        bad = [c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
        if bad:
            raise UserError(
                f"value contains a newline or control character ({bad[0]!r})",
                where=path,
                todo="use a single-line value without control characters",
            )
        return value
    raise UserError(
        f"value {value!r} has type {type(value).__name__}",
        where=path,
        todo="use a bool, int, float or single-line string",
    )


_INT_RE = re.compile(r"[-+]?[0-9]+")
_FLOAT_RE = re.compile(r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+)")


def parse_set_option(option: str) -> tuple[str, Scalar]:
    """``"featureGates.X=true"`` -> ``("featureGates.X", True)``.

    Values are typed the YAML way: true/false (any case) -> bool, integers -> int, decimals
    -> float, anything else -> str. Quote a value ('5' or "5") to force a string.
    """
    path, sep, raw = option.partition("=")
    if not sep or not path:
        raise UserError(f"--set {option!r} has no PATH=VALUE", where="--set", todo=_SET_HELP)
    if any(ch in option for ch in "\x00\n\r"):
        # a NUL or line break would reach the kubelet config (and its YAML) as written
        raise UserError(f"--set {option!r} contains a NUL or line break", "--set", _SET_HELP)
    path = path.strip()  # spaces only: a line break was refused above
    split_path(path)
    raw = raw.strip()
    value: Scalar
    if raw == "":
        raise UserError(
            "empty value", where=path, todo="give a value; write '' for an empty string"
        )
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        value = raw[1:-1]
    elif raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    elif _INT_RE.fullmatch(raw):
        value = int(raw)
    elif _FLOAT_RE.fullmatch(raw):
        value = float(raw)
    else:
        value = raw
    return path, check_value(path, value)


# --------------------------------------------------------------------------- reading


def _safe_load(text: str, where: str) -> Any:
    yaml = YAML(typ="safe", pure=True)
    try:
        return yaml.load(text)
    except YAMLError as exc:
        raise ConfigError(
            f"not valid YAML: {_one_line(exc)}",
            where=where,
            todo="fix the file (kubelet would not start with it either)",
        ) from exc


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def parse_config(text: str, where: str = "kubelet config") -> dict[str, Any]:
    """The config as plain Python data; ConfigError unless it is a KubeletConfiguration."""
    data = _safe_load(text, where)
    if not isinstance(data, dict):
        raise ConfigError(
            f"expected a mapping, got {type(data).__name__}",
            where=where,
            todo="point the profile at the kubelet's KubeletConfiguration file",
        )
    if data.get("kind") != KIND:
        raise ConfigError(
            f"kind is {data.get('kind')!r}, not {KIND}",
            where=where,
            todo="point the profile at the kubelet's KubeletConfiguration file",
        )
    return data


def read_setting(text: str, path: str, where: str = "kubelet config") -> Scalar | None:
    """The value at ``path``, or None if it is not set (the kubelet default applies)."""
    segments = split_path(path)
    node: Any = parse_config(text, where)
    for seg in segments:
        if not isinstance(node, dict) or seg not in node:
            return None
        node = node[seg]
    if node is None or isinstance(node, bool | int | float | str):
        return node
    raise UserError(f"{path} is a {type(node).__name__}, not a single value", where=where)


def feature_gates(text: str, where: str = "kubelet config") -> dict[str, bool]:
    """The featureGates map as written in the file (empty if there is none)."""
    gates = parse_config(text, where).get("featureGates") or {}
    if not isinstance(gates, dict) or not all(isinstance(v, bool) for v in gates.values()):
        raise ConfigError("featureGates is not a map of names to true/false", where=where)
    return {str(k): v for k, v in gates.items()}


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out |= _leaves(value, f"{prefix}{key}." if prefix or key else "")
        return out
    return {prefix.rstrip("."): node}


def changed_fields(old: str, new: str) -> dict[str, list[Any]]:
    """Each setting (dotted path) whose value differs between two kubelet config files:
    path -> [old, new], None where a side does not set it. Lists compare whole."""
    before, after = _leaves(parse_config(old)), _leaves(parse_config(new))
    return {
        path: [before.get(path), after.get(path)]
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    }


def diff(old: str, new: str, name: str) -> str:
    """A unified diff of two versions of the file ``name`` ("" if they are equal)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


# --------------------------------------------------------------------------- rendering

# A conservative plain-scalar alphabet: no spaces, quotes, "#", "," or brackets, so a
# value written plain reads back the same in block and flow context alike.
_PLAIN_RE = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./%:@+=~-]*")
# Words and shapes YAML 1.1 or 1.2 (go-yaml in the kubelet, ruamel here) read as non-strings.
_YAML_NONSTR = frozenset(
    {"true", "false", "yes", "no", "y", "n", "on", "off", "null", "~", ".inf", ".nan", "="}
)
_NUMBERISH_RE = re.compile(
    r"[-+]?(?:0[xob][0-9a-f_]+|\.?[0-9][0-9_]*(?:\.[0-9_]*)?(?:e[-+]?[0-9]+)?)"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"  # YAML 1.1 base 60
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[tT].*)?"  # timestamps
)


def _render_str(value: str, style: str | None = None) -> str:
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    if style != '"' and _PLAIN_RE.fullmatch(value) and not value.endswith(":"):
        low = value.lower()
        if low not in _YAML_NONSTR and not whole(_NUMBERISH_RE, low):
            return value
    return json.dumps(value, ensure_ascii=False)


def _render(value: Scalar, style: str | None = None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        if "." not in mantissa:
            text = f"{mantissa}.0{e}{exponent}"
        return text
    return _render_str(value, style)


# --------------------------------------------------------------------------- editing


def _compose(text: str, where: str) -> MappingNode:
    try:
        root = YAML(typ="rt").compose(text)
    except YAMLError as exc:  # parse_config ran first, so this is rare
        raise ConfigError(f"not valid YAML: {_one_line(exc)}", where=where) from exc
    if not isinstance(root, MappingNode):
        raise ConfigError("expected a mapping", where=where)
    return root


def _find(mapping: MappingNode, key: str) -> tuple[Node, Node] | None:
    for k, v in mapping.value:
        if isinstance(k, ScalarNode) and k.value == key:
            return k, v
    return None


def _is_empty_null(node: Node) -> bool:
    return (
        isinstance(node, ScalarNode)
        and node.value == ""
        and node.style is None
        and node.start_mark.index == node.end_mark.index
    )


def _last_end(node: Node) -> int:
    """Index just past the last character that belongs to ``node``'s content."""
    if isinstance(node, MappingNode) and not node.flow_style and node.value:
        key, value = node.value[-1]
        if _is_empty_null(value) or value.start_mark.index < key.start_mark.index:
            return int(key.end_mark.index)  # "key:" alone, or "key: *alias" (node is elsewhere)
        return _last_end(value)
    if isinstance(node, SequenceNode) and not node.flow_style and node.value:
        return _last_end(node.value[-1])
    return int(node.end_mark.index)


def _line_end(text: str, index: int) -> int:
    """Index of the start of the line after the one holding ``text[index - 1]``."""
    if index > 0 and text[index - 1] == "\n":
        return index
    nl = text.find("\n", index)
    return len(text) if nl < 0 else nl + 1


def _indent_step(root: MappingNode) -> int:
    """How far this file indents a nested block mapping (2 if it never does)."""
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, MappingNode) and not node.flow_style:
            for k, v in node.value:
                if isinstance(v, MappingNode) and not v.flow_style and v.value:
                    step = v.value[0][0].start_mark.column - k.start_mark.column
                    if step > 0:
                        return int(step)
                stack.append(v)
    return 2


def _block_lines(keys: Sequence[str], value: Scalar, indent: int, step: int, nl: str) -> str:
    out = []
    for depth, key in enumerate(keys):
        pad = " " * (indent + depth * step)
        tail = " " + _render(value) if depth == len(keys) - 1 else ""
        out.append(f"{pad}{_render_str(key)}:{tail}{nl}")
    return "".join(out)


def _flow_entry(keys: Sequence[str], value: Scalar) -> str:
    inner = _render(value) if len(keys) == 1 else "{" + _flow_entry(keys[1:], value) + "}"
    return f"{_render_str(keys[0])}: {inner}"


def _insert_at(text: str, pos: int, lines: str, nl: str) -> str:
    if pos == len(text) and text and not text.endswith("\n"):
        lines = nl + lines
    return text[:pos] + lines + text[pos:]


def _apply_one(text: str, segments: tuple[str, ...], value: Scalar, where: str) -> str:
    root = _compose(text, where)
    nl = "\r\n" if "\r\n" in text else "\n"
    path = ".".join(segments)
    node: MappingNode = root
    for i, seg in enumerate(segments):
        found = _find(node, seg)
        rest = segments[i:]
        if found is None:  # add the missing keys to this mapping
            if node.flow_style:
                close = int(node.end_mark.index) - 1
                if text[close] != "}":
                    raise ConfigError(f"cannot find the end of the map holding {path}", where)
                entry = _flow_entry(rest, value)
                if not node.value:
                    return text[:close] + entry + text[close:]
                pos = _last_end(node.value[-1][1])
                return text[:pos] + ", " + entry + text[pos:]
            indent = int(node.value[0][0].start_mark.column)
            pos = _line_end(text, _last_end(node))
            return _insert_at(
                text, pos, _block_lines(rest, value, indent, _indent_step(root), nl), nl
            )
        key, child = found
        if i == len(segments) - 1:
            if not isinstance(child, ScalarNode):
                raise UserError(f"{path} is a map or list in the file, not a single value", where)
            if _is_empty_null(child):  # "key:" with nothing after it
                pos = int(key.end_mark.index)
                while text[pos] in " \t":
                    pos += 1
                if text[pos] != ":":
                    raise ConfigError(f"cannot find the value of {path}", where)
                return text[: pos + 1] + " " + _render(value) + text[pos + 1 :]
            start, end = int(child.start_mark.index), int(child.end_mark.index)
            if "\n" in text[start:end] or child.style in ("|", ">"):
                raise UserError(
                    f"{path} is a multi-line value", where, todo="put it on one line first"
                )
            return text[:start] + _render(value, child.style) + text[end:]
        if isinstance(child, MappingNode) and (child.value or child.flow_style):
            node = child
            continue
        if _is_empty_null(child):  # "featureGates:" with nothing under it
            step = _indent_step(root)
            indent = int(key.start_mark.column) + step
            pos = _line_end(text, int(key.end_mark.index))
            return _insert_at(text, pos, _block_lines(rest[1:], value, indent, step, nl), nl)
        raise UserError(
            f"{'.'.join(segments[: i + 1])} is not a map in the file, so {path} cannot be set",
            where,
            todo="fix the file by hand or choose another path",
        )
    raise AssertionError("unreachable")  # pragma: no cover


def _unshared(data: Any) -> Any:
    """A deep copy in which no two places share an object (YAML aliases are split apart,
    so setting one place in the copy does not change its alias)."""
    if isinstance(data, dict):
        return {k: _unshared(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_unshared(v) for v in data]
    return data


def _same(a: Any, b: Any) -> bool:
    """Equal with types (True is not 1, 1 is not 1.0) and with map keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def apply_settings(text: str, settings: Mapping[str, Scalar], where: str = "kubelet config") -> str:
    """``text`` with each path in ``settings`` set to its value (added if absent), every
    other byte unchanged. ``apply_settings(text, {})`` is ``text``."""
    checked = [(split_path(p), check_value(p, v)) for p, v in settings.items()]
    before = parse_config(text, where)
    if not checked:
        return text
    new = text
    expected = _unshared(before)
    for segments, value in checked:
        new = _apply_one(new, segments, value, where)
        target = expected
        for seg in segments[:-1]:
            if not isinstance(target.get(seg), dict):
                target[seg] = {}
            target = target[seg]
        target[segments[-1]] = value
    if not _same(parse_config(new, where), expected):
        raise ConfigError(
            "the change would touch more than the requested values",
            where=where,
            todo="the file uses YAML anchors, aliases or tags around these keys; simplify it",
        )
    return new
