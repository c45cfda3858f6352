"""What reaches the user's terminal: text only, at a width that can be printed.

Strings from the results database, an imported file, a CSV or a file name are data: a run's
command holding ``ESC]0;...BEL`` would retitle the terminal, ``ESC[2J`` clear it, a lone
surrogate (a file name that is not UTF-8) end the command in a ``UnicodeEncodeError``.
:func:`visible` is the one rule every output path applies (abtest.cli.render's consoles, its
plain ``echo``, the error lines of abtest.cli.main): every character that does not print
itself is shown as its escape (``\\x1b``, ``\\x07``, ``\\u202e``, ``\\udcff``), and one the
output's encoding cannot hold as ``\\uXXXX``. Rich markup is never read from a string at all
(the consoles are made with markup off), so ``[/]`` in a name is two brackets and a slash.

``COLUMNS=0`` made rich print nothing (a width of 0) and typer's help as well;
``TERMINAL_WIDTH=abc`` was a traceback in typer's help. :func:`sane_terminal_env` drops a
width that is not a positive number of columns, so rich and typer see no width at all and
use the terminal's own (80 in a pipe).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import MutableMapping

#: the characters kept as they are though they do not print themselves (rich expands a tab)
_KEPT_ALWAYS = frozenset("\t")
_WIDTH_VARIABLES = ("COLUMNS", "LINES", "TERMINAL_WIDTH")
MAX_COLUMNS = 10_000  # beyond any screen; a larger COLUMNS is junk like 0


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str, *, lines: bool = True, encoding: str | None = None) -> str:
    """``text`` as it may be written to a terminal: each character that is not printable
    (C0 and C1 controls, DEL, bidirectional overrides and other format characters, lone
    surrogates, unassigned code points) as its Python escape; a line break kept when
    ``lines`` (a CRLF as one; a cell of a one-line value passes False); with ``encoding``, a
    character it cannot encode (``é`` for ASCII) as its escape too. A backslash is kept."""
    if not text.isprintable():
        if lines:  # a config file's CRLF lines in a diff: line breaks, not a stray \r each
            text = text.replace("\r\n", "\n")
        kept = _KEPT_ALWAYS | {"\n"} if lines else _KEPT_ALWAYS
        text = "".join(ch if ch.isprintable() or ch in kept else _escape(ch) for ch in text)
    if encoding is not None and not _is_utf(encoding):
        try:
            text.encode(encoding)
        except UnicodeEncodeError:
            text = "".join(ch if _encodes(ch, encoding) else _escape(ch) for ch in text)
        except LookupError:  # an encoding Python does not know: the escapes are ASCII
            text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text


def _is_utf(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False


def _encodes(ch: str, encoding: str) -> bool:
    try:
        ch.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def _sane_width(value: str) -> bool:
    text = value.strip()
    return text.isascii() and text.isdigit() and 0 < int(text) <= MAX_COLUMNS


def sane_terminal_env(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Drop ``COLUMNS``, ``LINES`` or ``TERMINAL_WIDTH`` when it is not a whole number from 1
    to :data:`MAX_COLUMNS` (0, ``-5``, ``abc``, ``80x``): rich and typer then ask the
    terminal, 80 columns in a pipe. Returns the names dropped."""
    env = os.environ if environ is None else environ
    dropped = [name for name in _WIDTH_VARIABLES if name in env and not _sane_width(env[name])]
    for name in dropped:
        del env[name]
    return dropped
