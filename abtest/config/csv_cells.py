"""CSV cells that are safe to open in a spreadsheet (OWASP's CSV-injection rule).

A cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is run as a formula
by Excel, LibreOffice and Google Sheets; an arm, node or run name is the user's (or an imported
file's) text and may start so. Such a cell is written with a leading ``'`` (the spreadsheets'
"this is text" mark), except a plain number (``-0.25``, ``+3``, ``1e-3``), which stays a number.
Every CSV abtest writes (``report`` *.csv, ``analyze --format csv``) passes its cells here, and
a rounds CSV read back (``analyze``, ``regress --csv``) drops that mark from its arm and block.
"""

from __future__ import annotations

import re

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"\A[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")


def safe_cell(value: object) -> object:
    """``value`` as a CSV cell a spreadsheet shows as it is (non-text values unchanged)."""
    formula = isinstance(value, str) and value.startswith(FORMULA_START)
    if formula and not _PLAIN_NUMBER.search(str(value)):
        return "'" + str(value)
    return value


def unescape_cell(value: str) -> str:
    """A text cell as :func:`safe_cell` had it: abtest's own CSV read back (an arm ``+X``
    written as ``'+X``) gives the same name."""
    if value.startswith("'") and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value
