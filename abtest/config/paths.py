"""Files a user names for us to write (reports, JUnit, summaries, the results database) and
folders we read from: one set of checks, each failure one UserError naming the path and what to
do, never a traceback from the middle of a write."""

from __future__ import annotations

import os
from pathlib import Path

from abtest.errors import UserError


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file, or None (checked without creating anything)."""
    if "\x00" in str(path):
        return "the path contains a NUL byte"
    if path.is_dir():
        return "is a directory, not a file"
    parent = path.parent
    if not parent.exists():
        return f"folder {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a folder"
    if path.exists() and not os.access(path, os.W_OK):
        return "is not writable"
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"folder {parent} is not writable"
    return None


def write_output(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to the file a flag named; UserError (flag and path) when it cannot be."""
    problem = output_problem(path)
    if problem is None:
        try:
            path.write_text(text, encoding="utf-8")
            return
        except OSError as exc:
            problem = exc.strerror or type(exc).__name__
    raise UserError(
        f"cannot write {path}: {problem}", flag, "give a file path in a folder that exists"
    )


def check_output_dir(path: Path, flag: str) -> None:
    """A folder a command writes several files into: a folder, or a new one under a folder."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} is a file, not a folder", flag, "give a folder for the files")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{parent} is not a folder", flag, "give a path under a folder")
            if not os.access(parent, os.W_OK | os.X_OK) and not path.exists():
                raise UserError(f"folder {parent} is not writable", flag, "give another folder")
            break


def check_db_path(path: Path, where: str) -> None:
    """The results database: a file that is an SQLite database, or a new file in a folder that
    exists or can be made. A folder, a text file or a path under a file is refused here, before
    SQLite says "file is not a database" from the middle of a command."""
    if "\x00" in str(path):
        raise UserError("the path contains a NUL byte", where, "give a file path")
    if path.is_dir():
        raise UserError(f"{path} is a directory", where, "give the database file's path")
    if path.exists():
        try:
            with path.open("rb") as handle:
                head = handle.read(16)
        except OSError as exc:
            raise UserError(
                f"cannot read {path}: {exc.strerror}", where, "check the path"
            ) from None
        if head and head != b"SQLite format 3\x00":
            raise UserError(
                f"{path} is not an SQLite database",
                where,
                "give the results database, or a new file name",
            )
        return
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{parent} is not a folder", where, "give a path under a folder")
            break
