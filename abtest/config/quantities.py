"""Kubernetes resource quantities (``100m``, ``2``, ``128Mi``) as numbers: CPU in cores,
memory in bytes. Only what a playbook's requests and a Node's allocatable are written in."""

from __future__ import annotations

import re

from abtest.config.full_match import whole_match

_QUANTITY = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>[numkMGTPE]|[KMGTPE]i)?")
_FACTORS = {
    None: 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(text: str) -> float | None:
    """The quantity's value in base units, or None for a form this does not read (an
    exponent, a sign): a caller then skips its check rather than guess."""
    m = whole_match(_QUANTITY, text)
    if m is None:
        return None
    return float(m["number"]) * _FACTORS[m["suffix"]]
