"""`lab up --api-latency MS[:JITTER]`: the delay put on every lab kubelet's way to the API
server (abtest/lab/api_proxy.py), as a user writes it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtest.errors import UserError

FLAG = "--api-latency"
#: Above this a kubelet's requests are slower than any real control plane's round trip (a
#: region away is ~100 ms); 5 s is where its own timeouts and lease renewals start to fail.
MAX_MS = 5000
_FORM = re.compile(r"(\d+)(?::(\d+))?")


@dataclass(frozen=True)
class ApiLatency:
    """Milliseconds added to each response the kubelets get from the API server, and the
    jitter around it (each delay is uniform in latency +/- jitter)."""

    ms: int = 0
    jitter_ms: int = 0

    @property
    def off(self) -> bool:
        return self.ms == 0 and self.jitter_ms == 0

    def __str__(self) -> str:
        return f"{self.ms} ms" + (f" +/- {self.jitter_ms} ms" if self.jitter_ms else "")


def parse_api_latency(text: str) -> ApiLatency:
    """``MS`` or ``MS:JITTER``, non-negative integers, MS at most MAX_MS and JITTER at most MS
    (a larger jitter would ask for negative delays, which toxiproxy sends at once)."""
    found = _FORM.fullmatch(text.strip())
    todo = f"whole milliseconds, MS at most {MAX_MS} and JITTER at most MS: e.g. 20 or 20:5"
    if found is None:
        raise UserError(f"{text!r} is not MS[:JITTER]", FLAG, todo)
    ms, jitter = int(found.group(1)), int(found.group(2) or 0)
    if ms > MAX_MS:
        raise UserError(f"{ms} ms is more than the {MAX_MS} ms allowed", FLAG, todo)
    if jitter > ms:
        raise UserError(f"jitter {jitter} ms is more than the latency {ms} ms", FLAG, todo)
    return ApiLatency(ms, jitter)
