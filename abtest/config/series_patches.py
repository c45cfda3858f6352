"""A patch series' patches, read as ``git apply -p1`` reads them and checked whole.

The check is the boundary between a series folder (a user's, or one from a pull request) and
the machine that builds it, so it reads every header with :mod:`abtest.config.git_diff` and
refuses, one line naming the series, the patch file and the line:

- a path outside the release's source tree: absolute, or with a ``..`` component, or not plain
  (an empty or ``.`` component, a control character);
- a path under ``.git`` (any component ``.git``, in any case, as git's own check: git's files,
  where a hook runs code), or a ``.gitattributes`` or ``.gitmodules`` (they change what git
  does with the tree it writes);
- a file mode other than a file's ``100644`` or an executable's ``100755``: no symlink
  (``120000``) and no submodule (``160000``). Symlinks are refused outright rather than tracked:
  no kubelet patch needs one, and a series that may create ``pkg/evil -> /etc`` needs every
  later path checked against every link it made (and git's own write-through check is the
  only thing between such a link and ``/etc``);
- a binary patch, or anything git would read differently than this reader (see git_diff);
- a feature gate registered twice: each added ``Name featuregate.Feature = "Name"`` line is a
  registration, twice in one patch or once in each of two patches is a clash.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from abtest.config.git_diff import DiffError, FileDiff, Name, read_diff
from abtest.config.yaml_input import read_text
from abtest.errors import UserError

# a feature gate a patch registers in pkg/features: `+\tName featuregate.Feature = "Name"`
_ADDED_GATE = re.compile(r'\s*([A-Z][A-Za-z0-9]+)\s+featuregate\.Feature\s*=\s*"\1"')
_FILE_MODES = (0o100644, 0o100755)
_MODE_NAMES = {0o120000: "a symlink", 0o160000: "a submodule"}
_GIT_FILES = (".gitattributes", ".gitmodules")
PATCH_TODO = (
    "write the patch with git format-patch against the release's source; "
    "see kubelet-patches/README.md"
)
_PATHS_TODO = "a series may change only regular files inside the release's source tree"


@dataclass(frozen=True)
class Patch:
    """One unified diff of a series, as checked."""

    file: str
    sha256: str
    files: tuple[str, ...]  # the source files it writes (a deletion's: none)
    gates: tuple[str, ...]  # the feature gates it registers
    text: str = field(default="", repr=False, compare=False)  # the checked text git applies
    changes: tuple[FileDiff, ...] = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "sha256": self.sha256, "files": list(self.files)}


def read_patches(series: str, folder: Path, paths: list[Path]) -> tuple[Patch, ...]:
    """The patches at ``paths`` (in order), each checked, and their gates across the series."""
    patches = tuple(read_patch(series, path) for path in paths)
    seen: dict[str, str] = {}
    for p in patches:
        for gate in p.gates:
            if gate in seen:
                raise UserError(
                    f"feature gate {gate} is registered by both {seen[gate]} and {p.file}",
                    str(folder),
                    "register each gate in one patch",
                )
            seen[gate] = p.file
    return patches


def read_patch(series: str, path: Path) -> Patch:
    """One patch file, read as git reads it and checked: the paths it names, its modes, its
    gates. Every refusal is one UserError at ``PATCH line N``."""
    text = read_text(path, "patch")

    def check(name: Name) -> None:
        problem = _path_problem(name.path)
        if problem:
            raise UserError(
                f"series {series}: {name.header} {name.path!r} {problem}",
                f"{path} line {name.line}",
                _PATHS_TODO,
            )

    try:
        if "\0" in text:
            raise DiffError(text[: text.index("\0")].count("\n") + 1, "a NUL byte")
        changes = read_diff(text, check)
    except DiffError as exc:
        raise UserError(
            f"series {series}: not a patch git reads one way: {exc.what}",
            f"{path} line {exc.line}",
            PATCH_TODO,
        ) from None
    if not changes:
        raise UserError(
            f"series {series}: not a unified diff (no file header with a hunk)",
            str(path),
            PATCH_TODO,
        )
    for change in changes:
        _check_modes(series, path, change)
    files = tuple(dict.fromkeys(c.new for c in changes if c.new is not None))
    gates = _gates(series, path, changes)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Patch(path.name, digest, files, gates, text, tuple(changes))


def _path_problem(path: str) -> str | None:
    """Why a path a patch names is refused (None: a plain path inside the tree)."""
    parts = path.split("/")
    if path.startswith("/"):
        return "is outside the source tree (an absolute path)"
    if ".." in parts:
        return "is outside the source tree (a '..' component)"
    if any(p.isascii() and p.lower() == ".git" for p in parts):
        return "is under .git (git's own files, where a hook runs code)"
    if any(p.isascii() and p.lower() in _GIT_FILES for p in parts):
        return f"is a git control file ({parts[-1]} changes what git writes)"
    if "" in parts or "." in parts:
        return "is not a plain path (an empty or '.' component)"
    if any(c < " " or c == "\x7f" for c in path):
        return "has a control character in it"
    return None


def _check_modes(series: str, path: Path, change: FileDiff) -> None:
    for line, mode in change.modes:
        if mode in _FILE_MODES:
            continue
        what = _MODE_NAMES.get(mode, "neither a file (100644) nor an executable (100755)")
        raise UserError(
            f"series {series}: mode {mode:06o} ({what}) for {change.new or change.old!r}",
            f"{path} line {line}",
            "a series may not create or change symlinks or submodules: no kubelet patch "
            "needs one, and a later patch could write through a link",
        )


def _gates(series: str, path: Path, changes: list[FileDiff]) -> tuple[str, ...]:
    """The gates the patch registers, each once: a second registration is refused."""
    seen: dict[str, int] = {}
    for change in changes:
        for line, text in change.added:
            found = _ADDED_GATE.match(text)
            if found is None:
                continue
            gate = found.group(1)
            if gate in seen:
                raise UserError(
                    f"series {series}: feature gate {gate} is registered twice in this patch "
                    f"(lines {seen[gate]} and {line})",
                    f"{path} line {line}",
                    "register each gate once, in pkg/features/kube_features.go",
                )
            seen[gate] = line
    return tuple(seen)
