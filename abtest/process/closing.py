"""``with thing:`` closes the thing at the end of the block, however the block ends."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from abtest.process.stop import SignalGuard


class Closing:
    """A mixin for objects that hold a connection: ``__enter__`` returns the object,
    ``__exit__`` calls its :meth:`close` (exceptions pass through). An object that sets
    ``guard`` holds that :class:`SignalGuard` from ``__enter__`` until after the close."""

    guard: SignalGuard | None = None

    def __enter__(self) -> Self:
        if self.guard is not None:
            self.guard.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        finally:
            if self.guard is not None:
                self.guard.__exit__(exc_type, exc, tb)

    def close(self) -> None:
        raise NotImplementedError
