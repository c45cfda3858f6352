"""Files a user names for us to write (reports, JUnit, summaries, the results database), files
we read (catalogs, playbooks, profiles, kubeconfigs, patch series, CSVs, exports) and folders we
read from: one set of checks, each failure one UserError naming the path and what to do, never
a traceback from the middle of a write and never a read that blocks on a FIFO or a device."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from abtest.errors import UserError

# what a path may be besides a regular file, as a refusal names it
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)
# reading a FIFO blocks until a writer comes, a device may never end: opened without blocking,
# never as the controlling terminal, and checked on the descriptor itself
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

# what an output may replace is a regular file; the rest is named in the refusal: a link,
# a folder, and every other kind by its name in _KINDS
_NOT_A_FILE = (
    (stat.S_ISLNK, "is a symbolic link (abtest replaces only a regular file, never a link)"),
    (stat.S_ISDIR, "is a directory, not a file"),
    *(
        (test, f"is {kind} (abtest replaces only a regular file)")
        for test, kind in _KINDS
        if test is not stat.S_ISDIR
    ),
)
# a folder named after a run id or a node (reports/RUN_ID, reports/history-NODE): one plain
# path component, whole-string checked, so it never leaves the folder it is made under
_COMPONENT = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+=@-]{0,199}\Z")


def _kind_problem(path: Path) -> str | None:
    """Why what is at ``path`` (not followed if a link) may not be replaced; None for a
    regular file or nothing."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return next((why for test, why in _NOT_A_FILE if test(mode)), None)


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file, or None (checked without creating anything):
    only a regular file is replaced (never a link, a device, a FIFO, a folder), or a new one
    made in a writable folder."""
    if "\x00" in str(path):
        return "the path contains a NUL byte"
    if problem := _kind_problem(path):
        return problem
    parent = path.parent
    if not parent.exists():
        return f"folder {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a folder"
    if path.exists() and not os.access(path, os.W_OK):
        return "is not writable"
    if not os.access(parent, os.W_OK | os.X_OK):  # the rename needs the folder
        return f"folder {parent} is not writable"
    return None


def _new_file_mode(path: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)  # a replaced file keeps its mode
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _replace(path: Path, data: bytes) -> None:
    """Write a temporary file in ``path``'s folder, then rename it over ``path``: a reader
    sees the old file or the new one, never half of one; the rename replaces the name itself,
    so even a link or device put there since the check is not written through."""
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if problem := _kind_problem(path):  # changed since output_problem looked
            raise OSError(0, problem)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_output(path: Path, text: str | bytes, flag: str) -> Path:
    """Write ``text`` to the file a flag named (atomically; a regular file or a new one);
    UserError (flag and path) when it cannot be. Every output file abtest writes goes here."""
    problem = output_problem(path)
    if problem is None:
        try:
            _replace(path, text.encode("utf-8") if isinstance(text, str) else text)
            return path
        except OSError as exc:
            problem = exc.strerror or type(exc).__name__
    raise UserError(
        f"cannot write {path}: {problem}", flag, "give a file path in a folder that exists"
    )


def check_output_dir(path: Path, flag: str) -> None:
    """A folder a command writes several files into: a folder, or a new one under a folder."""
    if "\x00" in str(path):
        raise UserError("the path contains a NUL byte", flag, "give a folder for the files")
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} is a file, not a folder", flag, "give a folder for the files")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{parent} is not a folder", flag, "give a path under a folder")
            if not os.access(parent, os.W_OK | os.X_OK) and not path.exists():
                raise UserError(f"folder {parent} is not writable", flag, "give another folder")
            break


def derived_dir(base: Path, name: str, flag: str) -> Path:
    """``base / name`` for a folder named after a run id or a node: ``name`` must be one
    plain path component (no ``/``, ``..``, control character), and the folder, when it
    exists, a real folder (not a link out of ``base``); UserError naming ``flag`` else."""
    if not _COMPONENT.search(name) or ".." in name:
        raise UserError(
            f"cannot name a folder {name[:60]!r} under {base}/ (not a plain file name)",
            flag,
            f"give {flag} FOLDER",
        )
    path = base / name
    if path.is_symlink():
        raise UserError(f"{path} is a symbolic link", flag, f"remove it, or give {flag} FOLDER")
    check_output_dir(path, flag)
    return path


def output_subdir(parent: Path, name: str, flag: str) -> Path:
    """A folder inside an output folder (a report's figures/): made when missing, refused
    when something else (a link, a file) has its name."""
    path = parent / name
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UserError(f"{path} is not a folder (a link or a file)", flag, "remove it first")
    path.mkdir(exist_ok=True)
    return path


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "no regular file")
    return f"is {kind}, not a regular file"


def input_problem(path: Path) -> str | None:
    """Why what is at ``path`` cannot be read as a file (a link is followed: a link to a file
    is that file), or None for a regular file or for nothing there (the caller says "not
    found", or creates it). Checked without opening anything."""
    if "\x00" in str(path):
        return "the path contains a NUL byte"
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"cannot be read: {exc.strerror or type(exc).__name__}"
    return _not_regular(mode)


def check_input(path: Path, where: str, todo: str) -> None:
    """Refuse (one UserError naming ``where``) a path that exists but is not a regular file:
    for a file a library opens itself (SQLite, the kubernetes client), before it does."""
    if problem := input_problem(path):
        named = problem if "\x00" in str(path) else f"{path} {problem}"
        raise UserError(named, where, todo)


def read_input(
    path: Path,
    where: str,
    todo: str,
    limit: int,
    error: type[UserError] = UserError,
    allowed: str | None = None,
) -> bytes:
    """The bytes of a file a user names (every file abtest reads itself goes here): a regular
    file (a FIFO, socket, device or folder refused before a byte is read), at most ``limit``
    bytes (``allowed`` says so in the refusal); else one ``error`` naming ``where``."""
    allowed = allowed or f"the {limit} allowed"
    if problem := input_problem(path):
        raise error(problem, where, todo)
    with _open_input(path, where, todo, error) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise error(f"is {size} bytes, more than {allowed}", where, todo)
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise error(f"cannot read: {exc.strerror}", where, "check the path") from None
    if len(data) > limit:  # grew while it was read
        raise error(f"grew past {allowed} while it was read", where, todo)
    return data


def check_db_path(path: Path, where: str) -> None:
    """The results database: a file that is an SQLite database, or a new file in a folder that
    exists or can be made. A folder, a text file or a path under a file is refused here, before
    SQLite says "file is not a database" from the middle of a command; a FIFO, a socket or a
    device is refused before anything opens it (SQLite would block on a FIFO, or write to a
    device)."""
    check_input(path, where, "give the database file's path")
    if path.exists():
        head = _head(path, where)
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


def _open_input(path: Path, where: str, todo: str, error: type[UserError]) -> BinaryIO:
    """``path`` opened for reading as every input is: without blocking (a FIFO put there since
    input_problem looked does not wait for a writer) and checked on the descriptor itself."""
    flag = where != str(path)  # then the message names the file
    cannot = f"cannot read {path}" if flag else "cannot read"
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise error(f"{cannot}: no such file", where, "check the path") from None
    except OSError as exc:
        raise error(f"{cannot}: {exc.strerror}", where, "check the path") from None
    handle = os.fdopen(fd, "rb")
    if problem := _not_regular(os.fstat(fd).st_mode):
        handle.close()
        raise error(f"{path} {problem}" if flag else problem, where, todo)
    return handle


def _head(path: Path, where: str) -> bytes:
    """The first bytes of an existing database file."""
    with _open_input(path, where, "give the database file's path", UserError) as handle:
        try:
            return handle.read(16)
        except OSError as exc:
            raise UserError(
                f"cannot read {path}: {exc.strerror}", where, "check the path"
            ) from None
