"""Kubelet builds placed on a node by abtest: upload, verify, list and remove.

A build lives in ``<builds_dir>/<name>/`` (:func:`abtest.config.build_names.build_folder`):
its binary ``kubelet``, a patched build's ``source.json``, and, when abtest placed it, the
record :data:`PLACED_FILE` naming the build and the sha256 abtest placed. That record is the
placement's journal on the node, read by every controller: ``kubelets remove`` removes a
build only when its binary still has the sha256 the record names (abtest's, unchanged), and a
build abtest did not place and that differs from the controller's is refused, never
overwritten (a team's own file).

An upload goes in chunks (each one command with the bytes on its stdin, so it works over any
:class:`~abtest.node.connection.Connection`) into :data:`UPLOAD_FILE` in the build's folder, a
name no build is ever read by; its sha256 is checked on the node against the local build's,
then the record is written and the file renamed over ``kubelet`` (one ``mv``, same folder),
then the placed binary's sha256 and ``--version`` are checked. A controller killed
mid-upload leaves only that temp file, removed by the next attempt before it writes.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from abtest.config.build_names import BUILD_BINARY, BuildName, build_folder, parse_build_name
from abtest.config.goarch import goarch_of_machine
from abtest.config.json_object import json_object
from abtest.errors import NodeError, UserError
from abtest.node.remote_files import realpath
from abtest.node.session import NodeSession

PLACED_FILE = ".abtest-placed.json"
UPLOAD_FILE = ".kubelet.abtest-upload"
SOURCE_FILE = "source.json"
#: the bytes one upload command carries (ABTEST_UPLOAD_CHUNK_KIB sets it: a slow link wants
#: smaller commands; the kill test wants a slow upload)
CHUNK_BYTES = 8 << 20

Say = Callable[[str], None]

# the first chunk: the temp name is made fresh (a leftover one removed; noclobber, so nothing
# that appears in between is written through); each later chunk appends
_START = 'set -eu; mkdir -p -m 755 -- "$1"; rm -f -- "$2"; set -C; cat > "$2"'
_APPEND = 'set -eu; { [ -f "$1" ] && [ ! -L "$1" ]; } || exit 4; cat >> "$1"'
# the record goes in first (through its own temp name), then the rename; the folder is synced
_COMMIT = (
    'set -eu; chmod 755 -- "$1"; sync -- "$1" 2>/dev/null || sync; '
    'cat > "$3.tmp"; chmod 644 -- "$3.tmp"; mv -f -- "$3.tmp" "$3"; '
    'mv -f -- "$1" "$2"; sync -- "$(dirname -- "$2")" 2>/dev/null || sync'
)
_WRITE_SMALL = 'set -eu; cat > "$1.tmp"; chmod 644 -- "$1.tmp"; mv -f -- "$1.tmp" "$1"'


@dataclass(frozen=True)
class LocalFile:
    """A build's files on the controller: the binary, its sha256, a patched build's record."""

    binary: Path
    sha256: str
    source: bytes | None = None


@dataclass(frozen=True)
class NodeBuild:
    """One folder of builds_dir as the node holds it."""

    name: str
    size: int | None  # the binary's (None: no binary)
    sha256: str | None
    placed_by_abtest: bool  # the record names this very binary
    version: str | None  # what ``kubelet --version`` says (None: does not run)
    partial_upload: bool = False  # an upload's temp file is there (an interrupted placement)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def node_goarch(session: NodeSession) -> str:
    """The node's architecture as Go names it (``uname -m`` read over the connection)."""
    res = session.ssh.run(["uname", "-m"], timeout=20).check("uname -m")
    return goarch_of_machine(res.stdout, f"node {session.profile.node_name}")


def builds_dir(session: NodeSession) -> str:
    found = session.profile.kubelet_builds_dir
    if found is None:
        raise UserError(
            f"profile {session.profile.name} has no kubelet.builds_dir",
            session.profile.source,
            "set kubelet.builds_dir: the folder on the node abtest places builds in",
        )
    return found


def _sha256(session: NodeSession, path: str) -> str | None:
    res = session.run(["sh", "-c", '[ -f "$1" ] || exit 3; sha256sum -- "$1"', "sh", path])
    word = res.stdout.split()[0] if res.ok and res.stdout.split() else ""
    return word if len(word) == 64 else None


def _record(session: NodeSession, path: str) -> dict[str, Any] | None:
    """The placement record at ``path`` (None: absent, or not a JSON object: not ours)."""
    res = session.run(["sh", "-c", '[ -f "$1" ] || exit 3; head -c 8192 -- "$1"', "sh", path])
    return json_object(res.stdout) if res.ok else None


def _is_ours(session: NodeSession, folder: str, sha: str | None) -> bool:
    record = _record(session, f"{folder}/{PLACED_FILE}")
    return record is not None and sha is not None and record.get("sha256") == sha


def version_of(session: NodeSession, binary: str) -> str | None:
    script = '[ -f "$1" ] && [ -x "$1" ] || exit 126; exec "$1" --version'
    res = session.run(["sh", "-c", script, "sh", binary], timeout=60)
    return (res.stdout.strip() or None) if res.ok else None


def place_build(session: NodeSession, build: BuildName, local: LocalFile, say: Say = print) -> bool:
    """The build in its folder on the node, placed whole and verified; True if it was
    uploaded, False if the node held these very bytes already. UserError for a file there
    that abtest did not place and that differs (nothing is changed)."""
    folder = build_folder(builds_dir(session), build)
    binary = f"{folder}/{BUILD_BINARY}"
    node = session.profile.node_name
    have = _sha256(session, binary)
    if have == local.sha256:
        return False
    if have is not None and not _is_ours(session, folder, have):
        raise UserError(
            f"{binary} on {node} is not a build abtest placed, and it differs from the "
            f"controller's {build} (sha256 {have[:12]}, not {local.sha256[:12]}); nothing was "
            "changed",
            f"profile {session.profile.name}",
            "remove or rename that folder on the node, or set kubelet.place_builds: false "
            "to run it as it is",
        )
    say(f"placing kubelet {build} on {node} at {binary} ({local.binary.stat().st_size >> 20} MiB)")
    upload = f"{folder}/{UPLOAD_FILE}"
    _upload(session, local.binary, folder, upload)
    got = _sha256(session, upload)
    if got != local.sha256:
        session.run(["rm", "-f", "--", upload])
        raise NodeError(
            f"{upload} on {node}: sha256 {(got or 'unreadable')[:12]} after the upload, not the "
            f"local build's {local.sha256[:12]}; it was removed, nothing was placed"
        )
    record = {
        "build": build.name,
        "sha256": local.sha256,
        "placed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "placed_by": f"{_user()}@{socket.gethostname()}",
    }
    commit = ["sh", "-c", _COMMIT, "sh", upload, binary, f"{folder}/{PLACED_FILE}"]
    session.ssh.run(
        commit, sudo=session.profile.sudo, timeout=120, stdin=json.dumps(record).encode()
    ).check(f"placing {binary}")
    if local.source is not None:
        write = ["sh", "-c", _WRITE_SMALL, "sh", f"{folder}/{SOURCE_FILE}"]
        session.ssh.run(write, sudo=session.profile.sudo, timeout=60, stdin=local.source).check(
            f"writing {folder}/{SOURCE_FILE}"
        )
    _verify(session, build, binary, local.sha256)
    say(f"kubelet {build} placed on {node}: sha256 {local.sha256[:12]} checked, runs")
    return True


def _verify(session: NodeSession, build: BuildName, binary: str, sha: str) -> None:
    """The placed binary is the local build's bytes and says it is that build."""
    node = session.profile.node_name
    placed = _sha256(session, binary)
    if placed != sha:
        raise NodeError(f"{binary} on {node}: sha256 {placed} after placing, not {sha}")
    version = version_of(session, binary)
    if version is None or version.split()[-1] != build.name:
        raise NodeError(
            f"{binary} on {node} says {version!r} to --version, not Kubernetes {build.name} "
            "(a build for another architecture, or a broken file): it is left in place, marked "
            f"as abtest's; `abtest kubelets remove {build.name}` removes it"
        )


def _upload(session: NodeSession, local: Path, folder: str, upload: str) -> None:
    chunk = _chunk_bytes()
    sudo = session.profile.sudo
    first = True
    with local.open("rb") as source:
        while True:
            data = source.read(chunk)
            if not data and not first:
                return
            argv = ["sh", "-c", _START, "sh", folder, upload] if first else None
            argv = argv or ["sh", "-c", _APPEND, "sh", upload]
            session.ssh.run(argv, sudo=sudo, timeout=300, stdin=data).check(
                f"uploading to {upload}"
            )
            first = False


def _chunk_bytes() -> int:
    """The upload's chunk: ABTEST_UPLOAD_CHUNK_KIB (64-65536) when set, else 8 MiB."""
    text = os.environ.get("ABTEST_UPLOAD_CHUNK_KIB", "").strip()
    if not text:
        return CHUNK_BYTES
    if not text.isdigit() or not 64 <= int(text) <= 65536:
        raise UserError(
            f"{text[:20]!r} is not a chunk size", "ABTEST_UPLOAD_CHUNK_KIB", "64 to 65536 KiB"
        )
    return int(text) << 10


def _user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except (KeyError, OSError):
        return "?"


def list_builds(session: NodeSession) -> list[NodeBuild]:
    """Every folder of builds_dir named as a build, with its binary, oldest release first."""
    root = builds_dir(session)
    res = session.run(
        ["sh", "-c", '[ -d "$1" ] || exit 0; cd -- "$1" && ls -1A', "sh", root], timeout=20
    ).check(f"listing {root}")
    found = []
    for name in res.stdout.splitlines():
        try:
            build = parse_build_name(name, root, paths=False)
        except UserError:
            continue  # not a build's folder: not ours to list
        found.append((build.release, _node_build(session, build)))
    return [b for _, b in sorted(found, key=lambda pair: (pair[0], pair[1].name))]


def _node_build(session: NodeSession, build: BuildName) -> NodeBuild:
    folder = build_folder(builds_dir(session), build)
    binary = f"{folder}/{BUILD_BINARY}"
    sha = _sha256(session, binary)
    size = session.run(["stat", "-L", "-c", "%s", "--", binary], timeout=20)
    partial = session.run(["test", "-e", f"{folder}/{UPLOAD_FILE}"], timeout=20).ok
    return NodeBuild(
        build.name,
        int(size.stdout) if size.ok and size.stdout.strip().isdigit() else None,
        sha,
        _is_ours(session, folder, sha),
        version_of(session, binary) if sha is not None else None,
        partial,
    )


def remove_build(session: NodeSession, build: BuildName) -> str:
    """Remove a build abtest placed (its folder's files abtest wrote); refuses a build it did
    not place, or one whose binary a running kubelet is. Returns the folder removed."""
    folder = build_folder(builds_dir(session), build)
    binary = f"{folder}/{BUILD_BINARY}"
    node = session.profile.node_name
    sha = _sha256(session, binary)
    record = _record(session, f"{folder}/{PLACED_FILE}")
    if record is None or (sha is not None and record.get("sha256") != sha):
        what = "does not exist" if sha is None and record is None else "was not placed by abtest"
        raise UserError(
            f"kubelet build {build} on {node} {what}; nothing was removed",
            f"{folder}",
            "`abtest kubelets list` shows what abtest placed; remove other files by hand",
        )
    own = realpath(session.ssh, session.profile.kubelet_binary_path, sudo=session.profile.sudo)
    if own == binary or _running(session, binary):
        raise UserError(
            f"{binary} is the binary of a running kubelet on {node}; nothing was removed",
            f"{folder}",
            "restore the node's own kubelet first (`abtest node restore`)",
        )
    files = [
        binary,
        f"{folder}/{SOURCE_FILE}",
        f"{folder}/{UPLOAD_FILE}",
        f"{folder}/{PLACED_FILE}",
    ]
    session.run(["rm", "-f", "--", *files], timeout=20).check(f"removing {folder}")
    session.run(["rmdir", "--", folder], timeout=20)  # only when nothing else is in it
    return folder


_RUNNING = (
    'for p in /proc/[0-9]*; do [ "$(readlink -- "$p/exe" 2>/dev/null)" = "$1" ] && exit 3; '
    "done; exit 0"
)


def _running(session: NodeSession, binary: str) -> bool:
    return session.run(["sh", "-c", _RUNNING, "sh", binary], timeout=30).rc == 3
