"""``with thing:`` closes the thing at the end of the block, however the block ends."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """A mixin for objects that hold a connection: ``__enter__`` returns the object,
    ``__exit__`` calls its :meth:`close` (exceptions pass through)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError
