"""Where an SSH target really is, as OpenSSH would resolve it (paramiko's config parser).

:func:`resolve` reads the profile's ssh config (or ``~/.ssh/config``): HostName, Port, User
and IdentityFile when the profile does not give them, every UserKnownHostsFile and
GlobalKnownHostsFile (OpenSSH's defaults when none is named) plus the profile's own
known_hosts, ProxyJump (each hop resolved through the same config, as ``ssh -J`` does) and
ProxyCommand. :func:`load_known_hosts` reads those files the way OpenSSH does: the first
file that knows a (host, key type) decides, ``@revoked`` keys are refused, and lines it
cannot use are skipped. :mod:`abtest.node.ssh` connects with the result.
"""

from __future__ import annotations

import fnmatch
import getpass
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey
from paramiko.pkey import UnknownKeyType

from abtest.config.playbook import SSHTarget
from abtest.config.ssh_names import host_problem, port_problem, user_problem
from abtest.config.yaml_input import read_text
from abtest.errors import ConfigError, HostKeyError, NodeError, SSHConfigMissing

log = logging.getLogger(__name__)


class _Config(paramiko.SSHConfig):
    """paramiko's config parser, leaving ProxyCommand's %-tokens alone: paramiko expands %h
    from the name as given (unchecked) and %p from the config's Port, not the profile's.
    :func:`expand_proxy_command` expands them from the resolved, validated values instead."""

    def _allowed_tokens(self, key: str) -> list[str]:
        if key == "proxycommand":
            return []
        tokens: dict[str, list[str]] = getattr(self, "TOKENS_BY_CONFIG_KEY", {})
        return list(tokens.get(key, []))


def expand_proxy_command(command: str, *, host: str, port: int, user: str) -> str:
    """OpenSSH's ProxyCommand tokens (%h host, %p port, %r user, %n the name as given, %%),
    from values :mod:`abtest.config.ssh_names` already checked (no shell metacharacters)."""
    out: list[str] = []
    i = 0
    values = {"h": host, "p": str(port), "r": user, "n": host, "%": "%"}
    while i < len(command):
        ch = command[i]
        if ch == "%" and i + 1 < len(command):
            token = command[i + 1]
            if token not in values:
                raise ConfigError(
                    f"ProxyCommand uses %{token}, which abtest does not expand",
                    "ssh config",
                    "use only %h, %p, %r, %n and %%",
                )
            out.append(values[token])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _checked(value: object, check: Any, what: str, cfg_path: Path) -> None:
    if problem := check(value):
        raise ConfigError(f"{what}: {problem}", f"ssh config {cfg_path}", "fix the ssh config")


MAX_JUMPS = 8
# OpenSSH's defaults when the config names no known-hosts files
DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, after the ssh config alias is resolved.

    ``known_hosts`` is the file a newly accepted key is written to; ``known_hosts_files``
    every file read, most specific first (the profile's, each UserKnownHostsFile, each
    GlobalKnownHostsFile). ``jumps``: the ProxyJump hosts, connected in order, the target
    reached through a ``direct-tcpip`` channel of the last; ``proxy_command``: ProxyCommand.
    """

    alias: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]
    use_agent: bool
    known_hosts: str
    known_hosts_files: tuple[str, ...] = ()
    jumps: tuple[Endpoint, ...] = ()
    proxy_command: str | None = None

    @property
    def host_key_name(self) -> str:
        """The name the host key is stored under in known_hosts (OpenSSH's convention)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def describe(self) -> str:
        via = "".join(f" via {j.describe()}" for j in reversed(self.jumps))
        if self.proxy_command:
            via += f" via ProxyCommand {self.proxy_command!r}"
        return f"{self.user}@{self.hostname}:{self.port}{via}"


def resolve(target: SSHTarget) -> Endpoint:
    """Resolve the profile's host through its ssh config (or ~/.ssh/config).

    Explicit profile fields win over the ssh config, which wins over the defaults - as
    OpenSSH would: User, Port, IdentityFile, every UserKnownHostsFile and
    GlobalKnownHostsFile, ProxyJump (its hosts resolved through the same config) and
    ProxyCommand.
    """
    cfg_path = Path(target.config_file or Path.home() / ".ssh" / "config").expanduser()
    config: paramiko.SSHConfig | None = None
    if cfg_path.exists():  # read_text refuses a folder, a FIFO, a device
        try:
            config = _Config.from_text(read_text(cfg_path, "ssh config"))
        except (OSError, paramiko.SSHException) as exc:
            raise ConfigError(f"cannot read ssh config: {exc}", str(cfg_path)) from None
    elif target.config_file:
        raise SSHConfigMissing(
            f"ssh config {cfg_path} does not exist", "profile ssh.config", "check the path"
        )
    return _endpoint(
        target.host,
        config,
        cfg_path,
        port=target.port,
        user=target.user,
        key_file=target.key_file,
        use_agent=target.use_agent,
        known_hosts=target.known_hosts,
        seen=(),
    )


def _lookup(config: paramiko.SSHConfig | None, cfg_path: Path, host: str) -> dict[str, Any]:
    if config is None:
        return {}
    try:
        return dict(config.lookup(host))
    except paramiko.SSHException as exc:
        raise NodeError(f"ssh config {cfg_path}, host {host}: {exc}") from None


def _files(value: Any) -> list[str]:
    """A known-hosts option's file list (paramiko gives a string or a list of strings)."""
    items = value if isinstance(value, list) else [value] if value else []
    return [f for item in items for f in str(item).split() if f.lower() != "none"]


def _endpoint(
    host: str,
    config: paramiko.SSHConfig | None,
    cfg_path: Path,
    *,
    port: int | None,
    user: str | None,
    key_file: str | None,
    use_agent: bool,
    known_hosts: str | None,
    seen: tuple[str, ...],
    follow_jumps: bool = True,
) -> Endpoint:
    if host in seen or len(seen) >= MAX_JUMPS:
        raise NodeError(
            f"ssh config {cfg_path}: ProxyJump loop or chain too long: {' -> '.join((*seen, host))}"
        )
    options = _lookup(config, cfg_path, host)
    keys: tuple[str, ...]
    if key_file:
        keys = (key_file,)
    else:
        keys = tuple(str(Path(k).expanduser()) for k in options.get("identityfile") or ())
        keys = tuple(k for k in keys if Path(k).is_file())
    # the profile's file stands where `ssh -o UserKnownHostsFile=...` would: it replaces the
    # config's user files (a profile pointing at another file must not be outvoted by them)
    user_files = (
        [known_hosts]
        if known_hosts
        else _files(options.get("userknownhostsfile")) or list(DEFAULT_USER_KNOWN_HOSTS)
    )
    global_files = _files(options.get("globalknownhostsfile")) or list(DEFAULT_GLOBAL_KNOWN_HOSTS)
    read = user_files + global_files
    expanded = tuple(dict.fromkeys(str(Path(f).expanduser()) for f in read))
    jumps: tuple[Endpoint, ...] = ()
    jump_spec = str(options.get("proxyjump") or "").strip()
    if follow_jumps and jump_spec and jump_spec.lower() != "none":
        hops = [_jump_target(h.strip(), cfg_path) for h in jump_spec.split(",") if h.strip()]
        resolved = []
        for i, (hop_user, hop_host, hop_port) in enumerate(hops):
            resolved.append(
                _endpoint(
                    hop_host,
                    config,
                    cfg_path,
                    port=hop_port,
                    user=hop_user,
                    key_file=None,
                    use_agent=use_agent,
                    known_hosts=known_hosts,
                    seen=(*seen, host),
                    # as OpenSSH: only the first hop's own ProxyJump applies, the later hops
                    # are reached through the earlier ones
                    follow_jumps=i == 0,
                )
            )
        jumps = tuple(resolved)
    proxy = str(options.get("proxycommand") or "").strip()
    # every name and port is checked before it reaches a socket, a shell or known_hosts,
    # whether the profile or the ssh config gave it
    hostname = str(options.get("hostname") or host)
    _checked(hostname, host_problem, f"HostName of {host!r}", cfg_path)
    raw_port: object = port or options.get("port") or 22
    try:
        resolved_port = int(str(raw_port))
    except ValueError:
        resolved_port = -1
    _checked(resolved_port, port_problem, f"Port of {host!r}", cfg_path)
    resolved_user = str(user or options.get("user") or _local_user())
    _checked(resolved_user, user_problem, f"User of {host!r}", cfg_path)
    if proxy and proxy.lower() != "none" and not jumps:
        proxy = expand_proxy_command(proxy, host=hostname, port=resolved_port, user=resolved_user)
    else:
        proxy = ""
    return Endpoint(
        alias=host,
        hostname=hostname,
        port=resolved_port,
        user=resolved_user,
        key_files=keys,
        use_agent=use_agent,
        known_hosts=expanded[0],
        known_hosts_files=expanded,
        jumps=jumps,
        proxy_command=proxy or None,
    )


_JUMP_RE = re.compile(
    r"(?:ssh://)?(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:@\s]+)(?::(?P<port>\d+))?"
)


def _jump_target(spec: str, cfg_path: Path) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (or ``ssh://...``) of one ProxyJump hop."""
    m = _JUMP_RE.fullmatch(spec)
    if not m:
        raise NodeError(f"ssh config {cfg_path}: ProxyJump {spec!r} is not [user@]host[:port]")
    port = int(m["port"]) if m["port"] else None
    if port is not None and not 0 < port < 65536:
        raise NodeError(f"ssh config {cfg_path}: ProxyJump {spec!r}: bad port")
    return m["user"], m["host"].strip("[]"), port


def _local_user() -> str:
    return getpass.getuser()


@dataclass
class KnownHosts:
    """The host keys of every known-hosts file read; ``@revoked`` keys refused for the
    hosts their line names. ``@cert-authority`` lines are skipped (paramiko does not check
    host certificates: a host known only by its CA stays unknown, so it is refused)."""

    keys: paramiko.HostKeys = field(default_factory=paramiko.HostKeys)
    revoked: list[tuple[tuple[str, ...], paramiko.PKey]] = field(default_factory=list)
    files: tuple[str, ...] = ()

    def add_line(self, line: str, where: str) -> None:
        marker = ""
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            line = line.strip()
        try:
            entry = HostKeyEntry.from_line(line)
        except (paramiko.SSHException, InvalidHostKey, UnknownKeyType, ValueError) as exc:
            log.debug("%s: skipped a known-hosts line (%s)", where, exc)  # as OpenSSH does
            return
        if entry is None or entry.key is None:
            return
        if marker == "@revoked":
            self.revoked.append((tuple(entry.hostnames), entry.key))
            return
        if marker:
            return
        kind = entry.key.get_name()
        for name in entry.hostnames:
            # the first file that knows a (host, key type) decides, as OpenSSH reads them
            known = self.keys.lookup(name)
            if known is None or kind not in known:
                self.keys.add(name, kind, entry.key)

    def is_revoked(self, host_key_name: str, key: paramiko.PKey) -> bool:
        for patterns, bad in self.revoked:
            if bad == key and _host_matches(host_key_name, patterns):
                return True
        return False


def _host_matches(name: str, patterns: tuple[str, ...]) -> bool:
    """OpenSSH host patterns: ``*``/``?`` wildcards, ``!`` negation, hashed names."""
    matched = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        if pat.startswith("|1|"):
            hit = paramiko.HostKeys.hash_host(name, pat) == pat
        else:
            hit = fnmatch.fnmatchcase(name, pat)
        if hit and negate:
            return False
        matched = matched or hit
    return matched


def load_known_hosts(files: tuple[str, ...], into: paramiko.HostKeys | None = None) -> KnownHosts:
    """Every existing file of ``files``, most specific first, loaded ``into`` a client's host
    keys (or new ones); an unreadable file is an error."""
    known = KnownHosts(keys=into if into is not None else paramiko.HostKeys(), files=files)
    for name in files:
        path = Path(name)
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise HostKeyError(f"cannot read known_hosts {path}: {exc}") from None
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                known.add_line(line, str(path))
    return known
