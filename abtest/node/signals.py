"""SIGINT/SIGTERM become an exception, so ``finally`` blocks restore the node.

:class:`Interrupted` is a BaseException (like KeyboardInterrupt): ``except Exception``
does not swallow it. Inside :meth:`SignalGuard.shield` (a restore in progress) a signal is
remembered instead, and raised when the shield ends - a second Ctrl-C cannot cut a
rollback in half.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):  # named like KeyboardInterrupt, on purpose
    """The process got SIGINT or SIGTERM."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class SignalGuard:
    """Installs the handlers for its ``with`` block (main thread only; elsewhere a no-op)."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._shielded = 0
        self.pending: int | None = None
        self.active = False

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
            self.active = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        self.active = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._shielded:
            self.pending = signum
            return
        raise Interrupted(signum)

    @contextmanager
    def shield(self) -> Iterator[None]:
        """Defer signals for the block; a deferred one is raised when the outermost ends."""
        self._shielded += 1
        try:
            yield
        finally:
            self._shielded -= 1
        if not self._shielded and self.pending is not None:
            signum, self.pending = self.pending, None
            raise Interrupted(signum)
