"""Where the shipped data (gates/, playbooks/) lives, in a checkout and in an installed wheel.

The top-level ``gates/`` and ``playbooks/`` folders are mapped into the wheel as
``abtest/gates`` and ``abtest/playbooks`` (see pyproject.toml); an editable install reads
them from the repository root instead.
"""

from __future__ import annotations

from pathlib import Path

from abtest.errors import ConfigError

_NOUNS = {"gates": "catalog", "playbooks": "playbook"}


def data_dir(kind: str) -> Path:
    """The folder holding shipped files of one kind: ``gates`` or ``playbooks``."""
    package = Path(__file__).resolve().parent
    installed = package / kind  # inside an installed wheel
    if installed.is_dir():
        return installed
    return package.parent / kind  # a checkout (editable install): the repository root


def resolve(kind: str, name_or_path: str, suffix: str = ".yaml") -> Path:
    """A user's argument is a path if it names an existing file, else a shipped name."""
    candidate = Path(name_or_path).expanduser()
    if candidate.is_file():
        return candidate
    if "/" in name_or_path or name_or_path.endswith(suffix):
        shipped = data_dir(kind) / name_or_path.removeprefix(f"{kind}/")
        if shipped.is_file():
            return shipped
        raise ConfigError("file not found", name_or_path, "check the path")
    shipped = data_dir(kind) / f"{name_or_path}{suffix}"
    if shipped.is_file():
        return shipped
    known = sorted(p.stem for p in data_dir(kind).glob(f"*{suffix}"))
    raise ConfigError(
        f"unknown {_NOUNS.get(kind, kind)} {name_or_path!r}",
        kind,
        f"use one of {', '.join(known)} or a path to a YAML file",
    )
