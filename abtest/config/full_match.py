"""One rule for every name and value check: the WHOLE string matches.

``re.match(r"^name$", text)`` is not that: ``$`` also matches before a final newline, so
``"nodeName\\n"`` passes a ``^...$`` check (and then reaches a pod spec, a known_hosts line or a
shell). Every validator in abtest calls :func:`whole` with an unanchored pattern instead; a unit
test walks them all with a trailing newline, a NUL and an empty value.
"""

from __future__ import annotations

import re


def whole(pattern: re.Pattern[str], value: object) -> bool:
    """``value`` is a string and all of it, to the last character, matches ``pattern``."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def whole_match(pattern: re.Pattern[str], value: object) -> re.Match[str] | None:
    """The match of all of ``value`` (its groups), or None; :func:`whole` when only yes/no."""
    return pattern.fullmatch(value) if isinstance(value, str) else None
