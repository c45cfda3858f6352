"""Where the shipped data (gates/, playbooks/) lives, in a checkout and in an installed wheel.

The top-level ``gates/`` and ``playbooks/`` folders are mapped into the wheel as
``abtest/gates`` and ``abtest/playbooks`` (see pyproject.toml); an editable install reads
them from the repository root instead.
"""

from __future__ import annotations

import re
from pathlib import Path

from abtest.config.full_match import whole_match
from abtest.config.paths import input_problem
from abtest.errors import ConfigError

_NOUNS = {"gates": "catalog", "playbooks": "playbook", "kubelet-patches": "patch series"}


def data_dir(kind: str) -> Path:
    """The folder holding shipped files of one kind: ``gates``, ``playbooks`` or
    ``kubelet-patches`` (``abtest/kubelet_patches`` in a wheel)."""
    package = Path(__file__).resolve().parent.parent  # abtest/, above this config/
    installed = package / kind.replace("-", "_")  # inside an installed wheel
    if installed.is_dir():
        return installed
    return package.parent / kind  # a checkout (editable install): the repository root


def resolve(kind: str, name_or_path: str, suffix: str = ".yaml") -> Path:
    """A user's argument is a path if it names an existing file, else a shipped name. A FIFO,
    a socket or a device of that name is refused (reading one would block or never end), and
    so is a folder the argument names as a path (``./x``, ``x.yaml``)."""
    candidate = Path(name_or_path).expanduser()
    if candidate.is_file():
        return candidate
    pathlike = "/" in name_or_path or name_or_path.endswith(suffix)
    problem = input_problem(candidate)
    if problem and (pathlike or not candidate.is_dir()):
        raise ConfigError(problem, name_or_path, f"give a {_NOUNS.get(kind, kind)} YAML file")
    if pathlike:
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


# The one rule every command (node, batch, plan, gates, regress) applies to --profile, stated in
# their --help and the README: an argument naming an existing file is that file; otherwise it
# is a shipped name; never a silent switch from one to the other.
PROFILE_RULE = (
    "a path to an existing YAML file is that file; otherwise a shipped name (lab, "
    "kubeadm-systemd; `nodes/NAME.yaml` also names one)"
)
_SHIPPED_NAME = re.compile(r"(nodes/)?(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*?)(\.yaml)?")


def resolve_profile(name_or_path: str, base: Path | None = None) -> Path:
    """Where a node profile named by a user is. A relative path is looked up in ``base`` (the
    folder of the playbook whose ``profile:`` names it) or else the working folder; only when
    no such file exists is the argument a shipped profile's name."""
    where = "playbook profile:" if base is not None else "--profile"
    if not name_or_path or "\x00" in name_or_path:
        raise ConfigError("empty or invalid profile name", where, f"give {PROFILE_RULE}")
    given = Path(name_or_path).expanduser()
    candidate = given if given.is_absolute() or base is None else base / given
    if candidate.is_file():
        return candidate.resolve()
    if problem := input_problem(candidate):  # a folder, a FIFO, a device: never read
        raise ConfigError(f"{candidate} {problem}", where, "give a profile YAML file")
    folder = data_dir("playbooks") / "nodes"
    match = whole_match(_SHIPPED_NAME, name_or_path)
    if match and (folder / f"{match['name']}.yaml").is_file():
        return folder / f"{match['name']}.yaml"
    known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
    raise ConfigError(
        f"unknown node profile {name_or_path!r}: no file {str(candidate)!r} and no shipped "
        "profile of that name",
        where,
        f"give a path to a profile YAML, or one of {known}",
    )
