"""`lab up --api-faults KIB`: the proxy in front of the API server (abtest/lab/api_proxy.py)
cuts each lab kubelet connection after KIB KiB of its requests, so that some of the kubelet's
writes fail, as the status-retry gate needs (issue 45), as a user writes it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtest.errors import UserError

FLAG = "--api-faults"
#: Below this a connection may be cut inside its TLS handshake (the kubelet's client
#: certificate alone is ~1 KiB) or before its first request: the kubelet would never get a
#: request through, an outage rather than failing writes.
MIN_KIB = 4
#: 1 GiB: more than a kubelet sends in hours; a larger value is a typo.
MAX_KIB = 1 << 20
_FORM = re.compile(r"\d+")


@dataclass(frozen=True)
class ApiFaults:
    """KiB of requests after which the proxy cuts a kubelet connection (0: never)."""

    kib: int = 0

    @property
    def off(self) -> bool:
        return self.kib == 0

    def __str__(self) -> str:
        return "none" if self.off else f"a connection cut after every {self.kib} KiB of requests"


def parse_api_faults(text: str) -> ApiFaults:
    """``KIB``: 0 (off) or a whole number from MIN_KIB to MAX_KIB."""
    todo = f"0 (none) or whole KiB from {MIN_KIB} to {MAX_KIB}: e.g. 8"
    if _FORM.fullmatch(text.strip()) is None:
        raise UserError(f"{text!r} is not a whole number of KiB", FLAG, todo)
    kib = int(text.strip())
    if kib and not MIN_KIB <= kib <= MAX_KIB:
        raise UserError(f"{kib} KiB is outside {MIN_KIB}..{MAX_KIB}", FLAG, todo)
    return ApiFaults(kib)
