"""One build at a time in the cache: an exclusive ``flock`` on ``<cache>/build.lock``.

Builds share directories (a release's throwaway module serves its own kubelet and every
patched build of it) and Go's caches; two at once on a 2-core machine buy no time and could
write one build directory twice. A second build waits, says whose build it waits for, and
then finds what the first one built (its caller checks again under the lock). The kernel
drops the lock when its holder dies, so a killed build never leaves it held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def build_lock(cache: Path, say: Callable[[str], None], name: str = "build") -> Iterator[None]:
    """Held for the block; ``name`` another lock for what shares nothing with Go builds
    (the systemd node's image)."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            say(f"waiting for another build in {cache} (pid {holder}) to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
