"""Unified diffs read the way ``git apply -p1`` reads them: which files a patch touches.

A kubelet patch series is checked before anything is copied or built, and that check is the
boundary between a series folder and the build machine: it must see every path git will read,
write, create or remove. So this reader follows git's own reading of a patch (its apply.c),
header line by header line, rather than a regular expression over the text:

- a ``diff --git`` header runs over the extended header lines git knows (``old mode``, ``new
  mode``, ``new file mode``, ``deleted file mode``, ``copy from/to``, ``rename from/to`` and the
  older ``rename old/new``, ``similarity index``, ``dissimilarity index``, ``index``, ``---``,
  ``+++``) and ends at the first other line, as git's does; ``new file mode`` and ``deleted file
  mode`` take their name from the ``diff --git`` line, as git's do;
- a plain unified diff's header is a ``---`` line, a ``+++`` line, then an ``@@ -`` line;
- hunks are read by their line counts, so a ``--- `` or ``diff --git`` line inside a hunk is
  content and one after the counted lines is a header; git looks for headers anywhere between
  patches (a commit message, after the last hunk), and so does this reader;
- a name may be C-quoted (``"b/a\\057b"``: octal and backslash escapes, decoded to bytes, then
  UTF-8); ``---``/``+++`` names end at a tab and lose their first component (``-p1``);
  ``rename``/``copy`` names are whole, to the end of the line.

Where git would guess, or where two readings are possible, the reader refuses instead: a quoted
name without its closing quote on its line (git reads on into the next line), a control
character in a header line, a plain diff's name with a space in it or anything but a timestamp
after it (git's date heuristics decide where such a name ends), header lines that name other
files than the ``diff --git`` line, a binary patch (its content cannot be read). It says what it
read; which paths are allowed is the caller's policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

# "@@ -a[,b] +c[,d] @@" (git reads the counts and ignores what follows the second "@@")
_HUNK_HEAD = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# what a plain diff may put after a name's tab: GNU diff's timestamp, which git strips whole
_TIMESTAMP = re.compile(r"\t\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [+-]\d\d:?\d\d)?")
_MODE = re.compile(r"[0-7]{1,7}")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, "\\": 92, '"': 34}
# git's extended header lines, in the order git tries them (a line matches the first one)
_EXTENDED = (
    "--- ",
    "+++ ",
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "copy from ",
    "copy to ",
    "rename old ",
    "rename new ",
    "rename from ",
    "rename to ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
)


class DiffError(Exception):
    """A patch this reader cannot read the way git would: the 1-based line, and why."""

    def __init__(self, line: int, what: str) -> None:
        self.line = line
        self.what = what
        super().__init__(f"line {line}: {what}")


@dataclass(frozen=True)
class Name:
    """A path as one header line names it."""

    path: str
    line: int
    header: str  # "diff --git", "---", "+++", "rename from", "copy to", ...


@dataclass(frozen=True)
class FileDiff:
    """One file's change, as git will apply it."""

    line: int  # its first header line
    kind: str  # "modify", "create", "delete", "rename" or "copy"
    old: str | None  # the path git reads (None: a creation)
    new: str | None  # the path git writes (None: a deletion)
    names: tuple[Name, ...]  # every path any of its header lines names
    modes: tuple[tuple[int, int], ...]  # (line, mode) of every mode its header gives
    added: tuple[tuple[int, str], ...] = field(repr=False)  # (line, text) of each added line


def read_diff(text: str, check: Callable[[Name], None] = lambda name: None) -> list[FileDiff]:
    """Every file change in ``text``, in order; a DiffError where git's reading is not sure.
    ``check`` sees each name as soon as it is read (before a later line can make the header
    inconsistent), so a caller's refusal names the path itself."""
    lines = text.split("\n")  # only "\n" ends a line for git ("\r", "\f" do not)
    last = len(lines) - 1  # lines[last] has no newline: never a header git reads
    found: list[FileDiff] = []
    i = 0
    while i < last:
        line = lines[i]
        if line.startswith("diff --git "):
            change, i = _git_patch(lines, i, check)
            found.append(change)
        elif line.startswith("--- ") and i + 1 < last and lines[i + 1].startswith("+++ "):
            change, i = _plain_patch(lines, i, check)
            found.append(change)
        elif _HUNK_HEAD.match(line):
            raise DiffError(i + 1, "a hunk outside any file's diff (no header before it)")
        else:
            i += 1
    return found


class _GitHeader:
    """What a ``diff --git`` header has said so far, set the way git's header parser sets it."""

    def __init__(self, line: int, rest: str, check: Callable[[Name], None]) -> None:
        self.line = line
        self.check = check
        self.rest = rest
        self.default = _default_name(rest, line)
        self.old: str | None = None
        self.new: str | None = None
        self.flags = {"new": False, "delete": False, "rename": False, "copy": False}
        self.names: list[Name] = []
        self.modes: list[tuple[int, int]] = []
        if self.default is not None:
            self._note(Name(self.default, line, "diff --git"))

    def _note(self, name: Name) -> None:
        self.check(name)
        self.names.append(name)

    def take(self, op: str, value: str, line: int) -> None:
        header = op.strip()
        if op in ("--- ", "+++ "):
            self._side(op == "--- ", value, line)
        elif op in ("old mode ", "new mode "):
            self.modes.append((line, _mode(value, line)))
        elif op in ("deleted file mode ", "new file mode "):
            self.modes.append((line, _mode(value, line)))
            if op == "new file mode ":
                self.flags["new"], self.new = True, self.default
            else:
                self.flags["delete"], self.old = True, self.default
        elif op.startswith(("copy ", "rename ")):
            self.flags[op.split()[0]] = True
            name = _find_name(value, 0, tab=False, line=line)
            self._note(Name(name, line, header))
            if op.endswith((" from ", " old ")):
                self.old = name
            else:
                self.new = name
        elif op == "index ":
            mode = _index_mode(value, line)
            if mode is not None:
                self.modes.append((line, mode))
        if sum(self.flags.values()) > 1:
            raise DiffError(line, f"{header}: a header that is two of new, deleted, rename, copy")

    def _side(self, old_side: bool, value: str, line: int) -> None:
        null = self.flags["new"] if old_side else self.flags["delete"]
        current = self.old if old_side else self.new
        header = "---" if old_side else "+++"
        if null or _is_dev_null(value):
            if not (null and _is_dev_null(value) and current is None):
                raise DiffError(line, f"{header} /dev/null only for a new or a deleted file")
            return
        name = _find_name(value, 1, tab=True, line=line)
        self._note(Name(name, line, header))
        if current is not None and current != name:
            raise DiffError(line, f"{header} names {name!r}, its header {current!r}")
        if old_side:
            self.old = name
        else:
            self.new = name

    def finish(self) -> tuple[str, str | None, str | None]:
        """The change's kind and its two paths, once the header is read whole."""
        old, new, flags = self.old, self.new, self.flags
        if old is None and new is None:
            old = new = self.default
        if (new is None and not flags["delete"]) or (old is None and not flags["new"]):
            raise DiffError(self.line, "a diff --git header without the file's name")
        kind = next((k for k in ("rename", "copy") if flags[k]), "modify")
        kind = "create" if flags["new"] else "delete" if flags["delete"] else kind
        if (kind == "create" and old is not None) or (kind == "delete" and new is not None):
            raise DiffError(self.line, f"a {kind} whose header names both an old and a new file")
        if kind == "modify" and old != new:
            raise DiffError(self.line, f"names {old!r} and {new!r} but is no rename or copy")
        first, second = old or new, new or old
        if (first, second) not in _git_line_pairs(self.rest, self.line):
            raise DiffError(self.line, f"the diff --git line does not name {second!r}")
        return kind, old, new


def _git_patch(lines: list[str], start: int, check: Callable[[Name], None]) -> tuple[FileDiff, int]:
    _plain_header_line(lines[start], start + 1)
    head = _GitHeader(start + 1, lines[start][len("diff --git ") :], check)
    i, last = start + 1, len(lines) - 1
    while i < last:
        op = next((p for p in _EXTENDED if lines[i].startswith(p)), None)
        if op is None:
            break
        _plain_header_line(lines[i], i + 1)
        head.take(op, lines[i][len(op) :], i + 1)
        i += 1
    if i == start + 1:
        raise DiffError(start + 1, "a diff --git line without header lines after it")
    kind, old, new = head.finish()
    hunks, added, i = _hunks(lines, i)
    if not hunks:
        _refuse_binary(lines, i)
        if kind == "modify" and len({m for _, m in head.modes}) < 2:
            raise DiffError(start + 1, "a file diff that changes nothing (no hunk)")
    change = FileDiff(start + 1, kind, old, new, tuple(head.names), tuple(head.modes), tuple(added))
    return change, i


def _plain_patch(
    lines: list[str], start: int, check: Callable[[Name], None]
) -> tuple[FileDiff, int]:
    """A ``---``/``+++`` header without ``diff --git``: git takes both names from it."""
    for i in (start, start + 1):
        _plain_header_line(lines[i], i + 1)
    if start + 2 >= len(lines) - 1 or not lines[start + 2].startswith("@@ -"):
        raise DiffError(start + 1, "a ---/+++ header without a hunk right after it")
    old_text, new_text = lines[start][4:], lines[start + 1][4:]
    names: list[Name] = []
    old = new = None
    if not _is_dev_null(old_text):
        old = _plain_name(old_text, start + 1)
        names.append(Name(old, start + 1, "---"))
        check(names[-1])
    if not _is_dev_null(new_text):
        new = _plain_name(new_text, start + 2)
        names.append(Name(new, start + 2, "+++"))
        check(names[-1])
    if old is None and new is None:
        raise DiffError(start + 1, "--- and +++ are both /dev/null")
    kind = "create" if old is None else "delete" if new is None else "modify"
    if old is not None and new is not None:
        # git writes to the shorter name when the other only adds to it ("x" and "x.orig")
        old = new = old if len(old) < len(new) and new.startswith(old) else new
    _, added, i = _hunks(lines, start + 2)
    return FileDiff(start + 1, kind, old, new, tuple(names), (), tuple(added)), i


def _hunks(lines: list[str], i: int) -> tuple[int, list[tuple[int, str]], int]:
    """The hunks from line ``i`` on, each read by its counts: how many, the added lines, and
    where the next header may start."""
    count, added, last = 0, [], len(lines) - 1
    while i < last and lines[i].startswith("@@ -"):
        head = _HUNK_HEAD.match(lines[i])
        if head is None:
            raise DiffError(i + 1, "a hunk header git cannot read (corrupt patch)")
        start = i + 1
        old = int(head[2]) if head[2] is not None else 1
        new = int(head[4]) if head[4] is not None else 1
        changed = False
        i += 1
        while old or new:
            if i >= last:
                raise DiffError(start, "the patch ends inside this hunk (its counts are wrong)")
            line = lines[i]
            kind = line[:1]
            if kind in ("", " "):
                old, new = old - 1, new - 1
            elif kind == "-":
                old, changed = old - 1, True
            elif kind == "+":
                new, changed = new - 1, True
                added.append((i + 1, line[1:]))
            elif not (line.startswith("\\ ") and len(line) >= 11):
                raise DiffError(i + 1, "a line in a hunk that is no context, + or - line")
            if old < 0 or new < 0:
                raise DiffError(start, "a hunk with more lines than its header counts")
            i += 1
        if not changed:
            raise DiffError(start, "a hunk that changes nothing")
        if i < len(lines) and lines[i].startswith("\\ "):
            i += 1  # "\ No newline at end of file" after the counted lines
        count += 1
    return count, added, i


def _refuse_binary(lines: list[str], i: int) -> None:
    line = lines[i] if i < len(lines) else ""
    binary = line.endswith(" differ") and line.startswith(("Binary files ", "Files "))
    if line == "GIT binary patch" or binary:
        raise DiffError(i + 1, "a binary patch (its content cannot be checked)")


def _plain_header_line(line: str, number: int) -> None:
    bad = next((c for c in line if (c < " " and c != "\t") or c == "\x7f"), None)
    if bad is not None:
        raise DiffError(number, f"a control character ({bad!r}) in a header line")


def _is_dev_null(value: str) -> bool:
    return value == "/dev/null" or value.startswith(("/dev/null\t", "/dev/null "))


def _mode(value: str, line: int) -> int:
    if not _MODE.fullmatch(value):
        raise DiffError(line, f"{value!r} is not a file mode")
    return int(value, 8)


def _index_mode(value: str, line: int) -> int | None:
    """The mode an ``index OLD..NEW MODE`` line gives (git takes it as the old mode)."""
    dot = value.find("..")
    if dot < 0 or dot != value.find("."):
        return None
    _, space, mode = value[dot + 2 :].partition(" ")
    return _mode(mode, line) if space else None


def _find_name(value: str, strip: int, *, tab: bool, line: int) -> str:
    """A name as git's find_name reads it: quoted, or to the end (a tab too, where ``tab``),
    less its first ``strip`` components."""
    if value.startswith('"'):
        name, end = _unquote(value, line)
        tail = value[end:]
        if tail and not (tab and tail.startswith("\t")):
            raise DiffError(line, f"text after the quoted name: {tail!r}")
    else:
        name = value.split("\t", 1)[0] if tab else value
    return _strip(name, strip, line)


def _plain_name(value: str, line: int) -> str:
    """A name in a plain diff's ``---``/``+++`` line (git: find_name_traditional)."""
    if value.startswith('"'):
        name, end = _unquote(value, line)
        tail = value[end:]
    else:
        name, tab, tail = value.partition("\t")
        tail = tab + tail
        if " " in name:
            raise DiffError(line, f"{name!r}: a name with a space needs a diff --git header")
    if tail and not _TIMESTAMP.fullmatch(tail):
        raise DiffError(line, f"{tail!r} after the name is not a timestamp")
    return _strip(name, 1, line)


def _strip(name: str, count: int, line: int) -> str:
    """``-p1``: the name less its first component (git: everything through the first '/').
    An absolute name stays whole: git would make ``/etc/passwd`` ``etc/passwd``, but what its
    author meant is what the caller's policy refuses."""
    for _ in range(count if not name.startswith("/") else 0):
        _, slash, name = name.partition("/")
        if not slash:
            raise DiffError(line, "a name without the a/ or b/ that -p1 takes off")
    if not name:
        raise DiffError(line, "a header line that names no file")
    return name


def _unquote(text: str, line: int) -> tuple[str, int]:
    """A C-quoted name at the start of ``text`` (git: unquote_c_style): the decoded name and
    where its closing quote ends. The quote must close on this line."""
    out = bytearray()
    i = 1
    while True:
        if i >= len(text):
            raise DiffError(line, "a quoted name without its closing quote on its line")
        c = text[i]
        if c == '"':
            break
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        code = text[i + 1 : i + 2]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1 : i + 4]):
            out.append(int(text[i + 1 : i + 4], 8))
            i += 4
        else:
            raise DiffError(line, f"a quoted name with a bad escape {text[i : i + 4]!r}")
    try:
        return out.decode("utf-8"), i + 1
    except UnicodeDecodeError:
        raise DiffError(line, "a quoted name that is not UTF-8") from None


def _default_name(rest: str, line: int) -> str | None:
    """The name git takes from ``diff --git A B`` when A and B are the same file less their
    first components (git: git_header_name); None when they are not."""
    pairs = _git_line_pairs(rest, line)
    return next((a for a, b in pairs if a == b), None)


def _git_line_pairs(rest: str, line: int) -> list[tuple[str, str]]:
    """Every way ``A B`` after ``diff --git`` reads as two -p1 names (a name may be quoted;
    unquoted names with spaces split at any space)."""
    if rest.startswith('"'):
        first, end = _unquote(rest, line)
        halves = [(first, rest[end:].lstrip(" \t"))] if rest[end : end + 1] in " \t" else []
    elif '"' in rest:
        quote = rest.index('"')
        halves = [(rest[:quote].rstrip(" \t"), rest[quote:])] if quote else []
    else:
        halves = [(rest[:k], rest[k + 1 :]) for k, c in enumerate(rest) if c in " \t"]
    pairs = []
    for a, b in halves:
        if b.startswith('"'):
            quoted = b
            b, end = _unquote(quoted, line)
            if end != len(quoted):
                continue  # text after the second name's closing quote
        try:
            pairs.append((_strip(a, 1, line), _strip(b, 1, line)))
        except DiffError:
            continue
    return pairs
