"""abtest: A/B test kubelet feature gates and config fields on batch pod start-up.

``abtest.open_results(path)`` reads a results database from Python (see ``abtest.results``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from abtest.process.version import __version__

if TYPE_CHECKING:
    from abtest.results import Results, open_results

__all__ = ["Results", "__version__", "open_results"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the results API needs pandas, which `abtest --version` and
    # `abtest gates --list` (both import this package) must start without.
    if name in ("open_results", "Results"):
        from abtest import results

        return getattr(results, name)
    raise AttributeError(f"module 'abtest' has no attribute {name!r}")
