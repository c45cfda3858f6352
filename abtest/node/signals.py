"""SIGINT/SIGTERM for the node layer: the process-wide stop mechanism of
:mod:`abtest.stopping`, re-exported under the name the node layer and the CLI import."""

from __future__ import annotations

from abtest.stopping import (
    HANDLED,
    Interrupted,
    SignalGuard,
    checkpoint,
    shield,
    sleep,
    stop_requested,
)

__all__ = [
    "HANDLED",
    "Interrupted",
    "SignalGuard",
    "checkpoint",
    "shield",
    "sleep",
    "stop_requested",
]
