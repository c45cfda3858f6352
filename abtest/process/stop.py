"""SIGINT/SIGTERM become an orderly stop of every thread, so ``finally`` blocks restore nodes.

Signals only ever reach the main thread. While a :class:`SignalGuard` is installed there, a
signal becomes a *stop request* that every thread of the process sees:

- the main thread gets :class:`Interrupted` at once (as it would get KeyboardInterrupt);
- a worker thread gets it at its next :func:`checkpoint`. Every wait and poll loop of the
  node, batch and sweep layers is one, and :func:`sleep` is a wait that wakes up on the
  request, so a worker blocked in a batch round or a restart wait stops within one poll.

Each thread gets each request once: the code unwinding after it (a restore, releasing a
lock) is not interrupted again by the same signal, only by a later one. Inside :func:`shield`
(a restore in progress) a request is held back and raised when the thread's outermost
shield ends - a second Ctrl-C cannot cut a rollback in half.

:class:`Interrupted` is a BaseException (like KeyboardInterrupt): ``except Exception`` does
not swallow it. This module sits beneath the node, batch and sweep layers (in ``abtest.process``)
because they all wait on it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from abtest.errors import Interrupted

HANDLED = (signal.SIGINT, signal.SIGTERM)


class _Requests:
    """The signals received while the outermost guard is installed."""

    def __init__(self) -> None:
        # re-entrant: the handler may run on the main thread while it holds the lock
        self.lock = threading.RLock()
        self.count = 0
        self.signum: int = signal.SIGTERM.value
        self.event = threading.Event()

    def add(self, signum: int) -> None:
        with self.lock:
            self.count += 1
            self.signum = signum
        self.event.set()


_requests: _Requests | None = None  # set while a guard is installed on the main thread
_guards = 0  # nesting depth of installed guards (main thread only)
_local = threading.local()  # per thread: .depth (shields), .seen (requests already raised)


def _depth() -> int:
    return int(getattr(_local, "depth", 0))


def stop_requested() -> bool:
    """A signal arrived since the outermost guard was installed."""
    req = _requests
    return req is not None and req.count > 0


def signals_received() -> int:
    """How many signals arrived since the outermost guard was installed (a test's fake node
    holds its restore until the second one, to show it does not cut the restore)."""
    req = _requests
    return 0 if req is None else req.count


def checkpoint() -> None:
    """Raise :class:`Interrupted` in this thread if a signal arrived that this thread has
    not been given yet - unless it is shielded (then the shield's end raises it)."""
    req = _requests
    if req is None or req.count == 0 or _depth() > 0:
        return
    with req.lock:
        seen = getattr(_local, "seen", None)
        if seen is not None and seen[0] is req and seen[1] >= req.count:
            return
        _local.seen = (req, req.count)
        signum = req.signum
    raise Interrupted(signum)


def sleep(seconds: float) -> None:
    """``time.sleep`` that ends early (with :class:`Interrupted`) on a stop request."""
    checkpoint()
    req = _requests
    if req is not None and not req.event.is_set():
        req.event.wait(max(0.0, seconds))
    else:
        # already requested (and given to this thread, or shielded): a plain poll interval
        time.sleep(max(0.0, seconds))
    checkpoint()


@contextmanager
def shield() -> Iterator[None]:
    """Hold stop requests back for the block (this thread only); a held one is raised when
    the outermost shield ends, unless the block itself raised."""
    _local.depth = _depth() + 1
    try:
        yield
    finally:
        _local.depth -= 1
    if _local.depth == 0:
        checkpoint()


def _handle(signum: int, frame: FrameType | None) -> None:
    req = _requests
    if req is None:  # pragma: no cover - the handler is installed only with a request
        raise Interrupted(signum)
    req.add(signum)
    checkpoint()  # the main thread: raises now unless shielded


class SignalGuard:
    """Installs the handlers for its ``with`` block on the main thread; on any other thread
    (a sweep worker) it is a no-op and the worker relies on the main thread's guard.
    Nested guards share one stop request; the outermost one ends it."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self.active = False

    def __enter__(self) -> SignalGuard:
        global _guards, _requests
        if threading.current_thread() is threading.main_thread():
            if _guards == 0:
                _requests = _Requests()
            _guards += 1
            for sig in HANDLED:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, _handle)
            self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        global _guards, _requests
        if not self.active:
            return
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        self.active = False
        _guards -= 1
        if _guards == 0:
            _requests = None

    def shield(self) -> Any:
        """:func:`shield` (kept as a method: the node layer calls ``guard.shield()``)."""
        return shield()
