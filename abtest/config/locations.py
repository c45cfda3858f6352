"""Where the results database is, as ``--db`` or ``ABTEST_DB`` gives it: a filesystem path (a
SQLite file) or a ``postgresql://`` / ``postgres://`` URL (the scheme in any case). Anything else
that names a database another way -- another scheme (``mysql://``, ``postgresql+psycopg://``,
``sqlite:///``) or a libpq keyword string (``host=... password=...``) -- is refused, never taken
as a file name (which would create a file named after the password).

A location is shown only through :func:`redact`: the password of the URL's user, the
``password`` / ``sslpassword`` query parameters and a keyword string's secrets become ``***``;
:func:`redact_argv` does the same for a command line a run stores.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from abtest.errors import UserError

URL_SCHEMES = ("postgresql", "postgres")
HIDDEN = "***"
# what libpq itself treats as secret in a URL's query or a keyword string
SECRET_KEYS = frozenset({"password", "sslpassword"})
_SCHEME = re.compile(r"\A\s*([A-Za-z][A-Za-z0-9+.\-]*)://")
# libpq's keyword string: KEY=VALUE pairs (https://www.postgresql.org/docs/current/libpq-connect.html)
_KEYWORDS = (
    "host|hostaddr|port|dbname|user|password|passfile|sslpassword|sslmode|sslcert|sslkey|"
    "sslrootcert|service|options|connect_timeout|application_name|target_session_attrs|"
    "channel_binding|gssencmode|requiressl|krbsrvname|require_auth|load_balance_hosts"
)
_KEYWORD_STRING = re.compile(rf"(?:\A|\s)(?:{_KEYWORDS})\s*=", re.IGNORECASE)
_KEYWORD_SECRET = re.compile(
    r"((?:\A|\s)(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE
)
_TODO = "give a SQLite file path or a postgresql://USER@HOST:PORT/DBNAME URL"


def url_scheme(text: str) -> str | None:
    """The scheme of ``text`` as written (``PostgreSQL``), or None for no ``scheme://``."""
    found = _SCHEME.search(text)  # anchored at the start (\A): a prefix, not a whole name
    return found.group(1) if found else None


def is_url(text: object) -> bool:
    """A ``postgresql://`` or ``postgres://`` URL (the scheme in any case)."""
    if not isinstance(text, str):
        return False
    scheme = url_scheme(text)
    return scheme is not None and scheme.lower() in URL_SCHEMES


def is_keyword_string(text: str) -> bool:
    """A libpq ``KEY=VALUE ...`` connection string (never a file we would create)."""
    return _KEYWORD_STRING.search(text) is not None


def parse_location(text: str, where: str) -> Path | str:
    """``text`` as the database to open: a URL (its scheme lower-cased, as libpq wants it)
    or a file path. UserError, without the text (it may hold a password), for the rest."""
    if "\x00" in text:
        raise UserError("the database location contains a NUL byte", where, _TODO)
    scheme = url_scheme(text)
    if scheme is not None:
        if scheme.lower() not in URL_SCHEMES:
            raise UserError(f"unsupported database URL scheme {scheme!r}", where, _TODO)
        if text.partition("://")[2].split("?")[0].count("@") > 1:
            # libpq splits at the first '@', so a password's tail would be taken as the host
            # (and shown as one): the URL is refused rather than guessed at
            raise UserError(
                "the database URL holds an unencoded '@' in its user or password",
                where,
                "percent-encode it as %40",
            )
        return scheme.lower() + text.strip()[len(scheme) :]
    if is_keyword_string(text):
        raise UserError(
            "a libpq KEY=VALUE connection string is not a database location",
            where,
            "give a postgresql://USER@HOST:PORT/DBNAME URL (the password in ~/.pgpass or "
            "PGPASSWORD), or a SQLite file path",
        )
    return Path(text).expanduser()


def _redact_query(query: str) -> str:
    parts = []
    for pair in query.split("&"):
        key, eq, _value = pair.partition("=")
        secret = unquote(key).strip().lower() in SECRET_KEYS
        parts.append(f"{key}={HIDDEN}" if eq and secret else pair)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """``url`` with no password: the user's (up to the *last* ``@``, so an unencoded ``@``,
    ``/`` or ``?`` in it hides with it) and the query's ``password`` / ``sslpassword``."""
    head, sep, rest = url.partition("://")
    if not sep:
        return url
    at = rest.rfind("@")
    colon = rest.find(":")
    if at >= 0 and 0 <= colon < at:
        rest = f"{rest[:colon]}:{HIDDEN}@{rest[at + 1 :]}"
    base, question, query = rest.partition("?")
    if question:
        fragment = ""
        if "#" in query:
            query, fragment = query.split("#", 1)
            fragment = "#" + fragment
        rest = f"{base}?{_redact_query(query)}{fragment}"
    return f"{head}://{rest}"


def redact(text: str) -> str:
    """A location as it may be shown, logged or stored: a URL (any scheme) or a keyword
    string without its secrets; a file path as it is."""
    if url_scheme(text) is not None:
        return redact_url(text)
    if is_keyword_string(text):
        return _KEYWORD_SECRET.sub(lambda m: m.group(1) + HIDDEN, text)
    return text


def secrets_in(text: str) -> list[str]:
    """The password strings a location holds (raw and percent-decoded), longest first: what a
    driver's message may quote back and must not."""
    found: list[str] = []
    if url_scheme(text) is not None:
        rest = text.partition("://")[2]
        at, colon = rest.rfind("@"), rest.find(":")
        if at >= 0 and 0 <= colon < at:
            found.append(rest[colon + 1 : at])
        for pair in rest.partition("?")[2].split("#")[0].split("&"):
            key, eq, value = pair.partition("=")
            if eq and unquote(key).strip().lower() in SECRET_KEYS:
                found.append(value)
    else:
        found += [m.group(2).strip("'") for m in _KEYWORD_SECRET.finditer(text)]
    out = {s for f in found if f for s in (f, unquote(f))}
    return sorted(out, key=len, reverse=True)


def scrub(message: str, location: str) -> str:
    """``message`` (a driver's error) with every secret of ``location`` hidden."""
    for secret in secrets_in(location):
        message = message.replace(secret, HIDDEN)
    return message


def redact_argv(argv: list[str]) -> list[str]:
    """A command line as a run stores it: a ``--db`` value (``--db X`` or ``--db=X``), and any
    argument that is a URL or a keyword string, without its secrets."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if arg.startswith("--") and eq:
            out.append(f"{name}={redact(value)}")
        else:
            out.append(redact(arg))
    return out
