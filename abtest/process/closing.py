"""``with thing:`` closes the thing at the end of the block, however the block ends."""

from __future__ import annotations

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

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            if self.guard is not None:
                self.guard.__exit__(*exc)

    def close(self) -> None:
        raise NotImplementedError
