"""Where the running kubelet's settings really come from: its command line and its drop-in
directory, read over SSH, and which of a sweep's factors they would override.

The kubelet builds its configuration in three layers (kubernetes v1.34.4,
cmd/kubelet/app/server.go, ``NewKubeletCommand``'s RunE):

1. ``loadConfigFile(--config)``: the file abtest edits;
2. ``mergeKubeletConfigurations(kubeletConfig, --config-dir)``: every ``*.conf`` file that
   ``filepath.WalkDir`` meets under the drop-in directory (subdirectories included, lexical
   order), each applied as a JSON merge patch over the result so far - maps such as
   ``featureGates`` merge key by key, a ``null`` removes a key, anything else is replaced;
3. ``kubeletConfigFlagPrecedence(kubeletConfig, args)``: the command line is parsed again
   over the merged object, so a flag wins over the file and every drop-in ("to preserve
   backwards-compatibility across binary upgrades", kubernetes issue #56171); for
   ``--feature-gates`` only the gates the flag names win, the file's others are added back.

So a factor that a flag or a drop-in also sets is written to a file whose value never takes
effect, and every visit then fails verification with "configz has X, expected Y". Pre-flight
refuses such a factor before anything changes, naming the flag or the file that wins.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from abtest.config.full_match import whole
from abtest.errors import NodeError, UserError
from abtest.node import kubelet_config as kc
from abtest.node.kubelet_flags import FLAG_FIELDS
from abtest.node.session import NodeSession

#: pflag shorthands the kubelet registers (``-v``)
SHORTHANDS = {"v": "v"}
DROPIN_SUFFIX = ".conf"  # mergeKubeletConfigurations: filepath.Ext(name) == ".conf"
_PID_RE = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class Flag:
    """One flag as pflag reads it: ``name`` normalized (``_`` -> ``-``, as the kubelet's
    ``cliflag.WordSepNormalizeFunc``), ``value`` None for a bare boolean flag."""

    name: str
    value: str | None
    written: str  # the flag as it appears on the command line, for messages

    @property
    def field(self) -> str | None:
        return FLAG_FIELDS.get(self.name)


@dataclass(frozen=True)
class DropIn:
    path: str
    data: dict[str, Any]


@dataclass(frozen=True)
class KubeletSources:
    """The running kubelet's command line and drop-in files."""

    pid: int
    argv: tuple[str, ...]
    flags: tuple[Flag, ...]
    config_dir: str | None
    dropins: tuple[DropIn, ...] = ()

    def value(self, name: str) -> str | None:
        """The last value given to flag ``name`` (pflag: the last one wins)."""
        found = [f.value for f in self.flags if f.name == name]
        return found[-1] if found else None

    @property
    def config_file(self) -> str | None:
        return self.value("config")

    def describe(self) -> str:
        fields = sorted({f.name for f in self.flags if f.field})
        text = f"pid {self.pid}, --config {self.config_file or '(none)'}"
        text += f"; config flags: {', '.join('--' + n for n in fields) or 'none'}"
        if self.config_dir:
            names = ", ".join(posixpath.basename(d.path) for d in self.dropins) or "none"
            text += f"; --config-dir {self.config_dir} ({names})"
        return text


@dataclass(frozen=True)
class Conflict:
    """A factor that the kubelet takes from somewhere other than the config file."""

    path: str
    winner: str  # the flag as written, or the drop-in file's path
    by_flag: bool
    also: tuple[str, ...] = ()  # other sources that set it and lose to the winner

    def message(self) -> str:
        if self.by_flag:
            text = (
                f"{self.path} is set on the kubelet's command line by `{self.winner}`, "
                "which wins over the config file and any drop-in"
            )
        else:
            text = (
                f"{self.path} is set by the drop-in {self.winner}, which is merged over "
                "the config file"
            )
        if self.also:
            text += f" (also set by {', '.join(self.also)})"
        return text


# --------------------------------------------------------------------------- pure parts


def parse_flags(argv: Sequence[str]) -> list[Flag]:
    """The flags of a kubelet command line (``argv[0]`` is the program), parsed the way
    pflag does: ``--name=value``, ``--name value`` (a bare ``--name`` followed by a word that
    is not a flag: the kubelet takes no positional arguments, so that word is the value),
    ``-v=N``, ``-v N``, ``-vN``; ``--`` ends the flags."""
    flags: list[Flag] = []
    args = list(argv[1:])
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            break
        if token.startswith("--"):
            body = token[2:]
        elif token.startswith("-") and len(token) > 1:
            short, rest = token[1], token[2:]
            name = SHORTHANDS.get(short)
            if name is None:
                continue
            body = name + ("=" + rest.lstrip("=") if rest else "")
        else:
            continue  # a stray word: not a flag
        name, eq, value = body.partition("=")
        name = name.replace("_", "-")
        if eq:
            flags.append(Flag(name, value, token))
        elif i < len(args) and not args[i].startswith("-"):
            flags.append(Flag(name, args[i], f"{token} {args[i]}"))
            i += 1
        else:
            flags.append(Flag(name, None, token))
    return flags


def _gates(value: str | None) -> dict[str, str]:
    """``--feature-gates`` (cliflag.MapStringBool): ``A=true,B=false``."""
    out = {}
    for item in (value or "").split(","):
        key, _, v = item.partition("=")
        if key.strip():
            out[key.strip()] = v.strip()
    return out


def _overlaps(path: str, field: str) -> bool:
    return path == field or path.startswith(field + ".") or field.startswith(path + ".")


def winning_flag(path: str, flags: Iterable[Flag]) -> Flag | None:
    """The last flag that sets ``path`` (pflag: a later value replaces an earlier one)."""
    found = None
    gate = path.split(".", 1)[1] if path.startswith("featureGates.") else None
    for flag in flags:
        field = flag.field
        if field is None or not _overlaps(path, field):
            continue
        # the flag's gates are merged over the file's, key by key: only the gates it names
        if field == "featureGates" and gate is not None and gate not in _gates(flag.value):
            continue
        found = flag
    return found


def dropin_sets(data: Any, path: str) -> bool:
    """Whether a drop-in's document sets ``path`` under JSON merge-patch rules: the value or
    one of its enclosing maps is there (a ``null`` removes it, which changes it too)."""
    node = data
    for segment in kc.split_path(path):
        if not isinstance(node, dict) or segment not in node:
            return False
        node = node[segment]
        if node is None:
            return True
    return True


def walk_order(paths: Iterable[str]) -> list[str]:
    """Drop-in files in the order ``filepath.WalkDir`` visits them: each directory's entries
    sorted by name, a subdirectory's files at the subdirectory's place. Sorting whole paths
    would differ (``/`` sorts after ``.``): WalkDir visits ``a/z.conf`` before ``a.conf``,
    because the entry ``a`` sorts before ``a.conf``."""
    return sorted(paths, key=lambda p: p.split("/"))


def conflicts(sources: KubeletSources, paths: Iterable[str]) -> list[Conflict]:
    """Every factor in ``paths`` that a flag or a drop-in sets, with what wins."""
    out = []
    for path in paths:
        setters = [d.path for d in sources.dropins if dropin_sets(d.data, path)]
        flag = winning_flag(path, sources.flags)
        if flag is not None:
            out.append(Conflict(path, flag.written, True, tuple(setters)))
        elif setters:
            out.append(Conflict(path, setters[-1], False, tuple(setters[:-1])))
    return out


def refusal(found: Sequence[Conflict], *, node: str, config_path: str) -> UserError:
    return UserError(
        "; ".join(c.message() for c in found)
        + f": a value written to {config_path} would not take effect",
        where=node,
        todo="remove the flag from the kubelet's command line (kubeadm-flags.env, "
        "KUBELET_EXTRA_ARGS, the unit's drop-ins) or the key from the drop-in file, "
        "or leave these factors out",
    )


def config_mismatch(sources: KubeletSources, config_path: str, cwd: str | None) -> str | None:
    """Why the profile's config file is not the one the kubelet reads (None when it is)."""
    given = sources.config_file
    if not given:
        return f"the kubelet (pid {sources.pid}) runs without --config: it reads no file"
    if not given.startswith("/") and cwd:
        given = posixpath.join(cwd, given)
    if posixpath.normpath(given) != posixpath.normpath(config_path):
        return (
            f"the kubelet (pid {sources.pid}) reads --config {sources.config_file}, "
            f"not the profile's {config_path}"
        )
    return None


# --------------------------------------------------------------------------- on the node

# Print "PID BASE64(cmdline)" for every process whose executable is the kubelet binary (a
# binary replaced while running reads "<path> (deleted)"). POSIX sh, no procps needed.
_FIND_BY_EXE = (
    'for p in /proc/[0-9]*; do e=$(readlink "$p/exe" 2>/dev/null) || continue; '
    'if [ "$e" = "$1" ] || [ "$e" = "$1 (deleted)" ]; then echo "${p#/proc/}"; fi; done'
)


def _pids(node: NodeSession) -> list[int]:
    profile = node.profile
    if profile.pid_command:
        res = node.profile_command(profile.pid_command, timeout=30)
        res.check(f"finding the kubelet ({profile.pid_command!r})")
        where = f"{profile.source}: kubelet.pid_command"
    else:
        res = node.ssh.run(
            ["sh", "-c", _FIND_BY_EXE, "sh", profile.kubelet_binary_path],
            sudo=profile.sudo,
            timeout=30,
        )
        res.check(f"finding processes of {profile.kubelet_binary_path}")
        where = f"{profile.source}: kubelet.binary_path"
    words = res.stdout.split()
    bad = [w for w in words if not whole(_PID_RE, w)]
    if bad:
        raise UserError(
            f"expected process ids, got {' '.join(bad)[:80]!r}",
            where,
            "the command must print the kubelet's pid",
        )
    return sorted({int(w) for w in words})


def _argv(node: NodeSession, pid: int) -> tuple[str, ...] | None:
    """The process's argv (None when it exited meanwhile)."""
    res = node.ssh.run(
        ["sh", "-c", 'base64 -w0 "/proc/$1/cmdline"', "sh", str(pid)],
        sudo=node.profile.sudo,
        timeout=30,
    )
    if not res.ok:
        return None
    try:
        raw = base64.b64decode(res.stdout.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NodeError(f"reading /proc/{pid}/cmdline: not base64 ({exc})") from exc
    parts = raw.decode("utf-8", "replace").split("\x00")
    if parts and parts[-1] == "":
        parts.pop()
    return tuple(parts) or None


def _cwd(node: NodeSession, pid: int) -> str | None:
    res = node.ssh.run(["readlink", f"/proc/{pid}/cwd"], sudo=node.profile.sudo, timeout=30)
    return (res.stdout.strip() or None) if res.ok else None


def _realpath(node: NodeSession, path: str) -> str:
    res = node.ssh.run(["readlink", "-f", "--", path], sudo=node.profile.sudo, timeout=30)
    return (res.stdout.strip() or path) if res.ok else path


def _dropins(node: NodeSession, directory: str) -> tuple[DropIn, ...]:
    sudo = node.profile.sudo
    # WalkDir does not follow a symlinked directory, but reads a symlink named *.conf
    res = node.ssh.run(
        ["find", directory, "(", "-type", "f", "-o", "-type", "l", ")", "-name", "*.conf"],
        sudo=sudo,
        timeout=30,
    )
    res.check(f"listing the kubelet's drop-in directory {directory}")
    out = []
    for path in walk_order(line for line in res.stdout.splitlines() if line):
        text = node.ssh.read_bytes(path, sudo=sudo).decode("utf-8", "replace")
        data = kc.parse_config(text, where=path)
        out.append(DropIn(path, data))
    return tuple(out)


def read_sources(node: NodeSession) -> tuple[KubeletSources, str | None]:
    """The running kubelet's command line and drop-ins, and why the profile's config file is
    not the one it reads (None when it is). With several kubelets on one binary (a
    multi-node lab), the one reading the profile's config file is the profile's."""
    profile = node.profile
    pids = _pids(node)
    found: list[KubeletSources] = []
    for pid in pids:
        argv = _argv(node, pid)
        if argv is not None:
            flags = tuple(parse_flags(argv))
            found.append(KubeletSources(pid, argv, flags, None))
    if not found:
        how = (
            f"kubelet.pid_command ({profile.pid_command!r})"
            if profile.pid_command
            else f"a process running {profile.kubelet_binary_path}"
        )
        raise UserError(
            f"no running kubelet found by {how}",
            profile.source,
            "start the kubelet, or set kubelet.pid_command to a command printing its pid",
        )
    relative = [s.pid for s in found if not (s.config_file or "/").startswith("/")]
    cwds = {pid: _cwd(node, pid) for pid in relative}
    mismatch = {
        s.pid: config_mismatch(s, profile.kubelet_config_path, cwds.get(s.pid)) for s in found
    }
    ours = [s for s in found if mismatch[s.pid] is None]
    if not ours:  # the same file through a symlink is the same file
        real = _realpath(node, profile.kubelet_config_path)
        ours = [
            s
            for s in found
            if s.config_file
            and _realpath(node, posixpath.join(cwds.get(s.pid) or "/", s.config_file)) == real
        ]
    chosen = ours[0] if ours else found[0]
    problem = None
    if not ours:
        problem = "; ".join(m for m in mismatch.values() if m)
    directory = chosen.value("config-dir")
    if directory:
        if not directory.startswith("/"):
            directory = posixpath.join(_cwd(node, chosen.pid) or "/", directory)
        chosen = KubeletSources(
            chosen.pid, chosen.argv, chosen.flags, directory, _dropins(node, directory)
        )
    return chosen, problem


def refuse_overridden(node: NodeSession, paths: Iterable[str]) -> KubeletSources:
    """The running kubelet's sources, after refusing (UserError, nothing changed) when it
    does not read the profile's config file or when a flag or drop-in sets one of ``paths``."""
    profile = node.profile
    sources, mismatch = read_sources(node)
    if mismatch:
        raise UserError(
            mismatch,
            profile.node_name,
            "set kubelet.config_path in the profile to the file the kubelet reads",
        )
    found = conflicts(sources, paths)
    if found:
        raise refusal(found, node=profile.node_name, config_path=profile.kubelet_config_path)
    return sources
