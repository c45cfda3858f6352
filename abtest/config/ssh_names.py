"""What OpenSSH accepts as a host name, a user name and a port, checked before any connection.

A host or user reaches a shell on the controller (a ProxyCommand's ``%h``/``%r``) and a line
of known_hosts (``--accept-new-host-key``): a name with a space, a quote, ``;`` or a newline
could run a command or plant a key for every host. OpenSSH itself refuses such names
(``ssh 'a;b'``: "hostname contains invalid characters"); so do we, naming the field.
"""

from __future__ import annotations

import ipaddress
import re

from abtest.config.full_match import whole
from abtest.config.numbers import PORT

# RFC 1123 labels, plus "_" (seen in real ssh config aliases); never a leading "-" (an option)
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})")
# POSIX portable user names (useradd's rule), with the "$" of machine accounts
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?")


def host_problem(host: object) -> str | None:
    """None for a host name or IP address OpenSSH would connect to, else what is wrong."""
    if not isinstance(host, str) or not host:
        return "expected a host name or address"
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in text:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return f"invalid IPv6 address {_shown(host)}"
        return None
    if not whole(_HOST, text) or ".." in text:
        return (
            f"invalid host name {_shown(host)}: letters, digits, '.', '-' and '_' only "
            "(no spaces, quotes, ';', '%' or line breaks), not starting with '-'"
        )
    return None


def user_problem(user: object) -> str | None:
    if not isinstance(user, str) or not whole(_USER, user):
        return (
            f"invalid user name {_shown(user)}: letters, digits, '.', '-' and '_' only, "
            "not starting with '-' or '.', at most 64 characters"
        )
    return None


def port_problem(port: object) -> str | None:
    return PORT.problem(port)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
