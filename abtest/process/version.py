"""The tool's version: stored with each run, sent as the API client's User-Agent, printed by
``abtest --version``. Here, beneath every layer, so that none imports the package root."""

from __future__ import annotations

__version__ = "0.1.0"
