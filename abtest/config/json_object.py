"""A stored or printed JSON object, read leniently: what a record holds where it may be absent,
hand-edited or not ours, so that a bad one is no error but simply not there."""

from __future__ import annotations

import json
from typing import Any


def json_object(value: object) -> dict[str, Any] | None:
    """``value`` as a JSON object: a dict as it is, a string parsed; None for anything else,
    an empty string, text that is not JSON, or JSON that is not an object."""
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
