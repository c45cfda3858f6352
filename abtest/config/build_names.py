"""A kubelet build's name, parsed once, and the one rule for where a build lives on a node.

A build is named ``v1.36.3`` (a release), ``v1.36.3+agc`` (a release and a patch series),
``v1.36.3+agc.p2`` (the series' first two patches) or, where a user's series folder may be
named, ``v1.36.3+./my-series`` (built as ``v1.36.3+my-series``). Every option, field and
stored value that names a build is parsed here into a :class:`BuildName`, which is carried
from there on: its ``str()`` is the canonical name (upstream's tag, the node's path segment,
what ``kubelet --version`` reports). A kubelet binary may also be a plain file on the node
(``binary=/opt/kubelet``, a catalog level ``/opt/kubelet``): a :class:`NodePath`, never a
name, so a :data:`KubeletBinary` is one or the other and says which.

Where a build lives on a node is :func:`build_folder`: ``<builds_dir>/<name>``, its binary
``<builds_dir>/<name>/kubelet`` (with a patched build's ``source.json`` beside it). The node
layer reads builds there and the lab places them there, through this one function.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from abtest.config.datafiles import data_dir
from abtest.config.releases import Release, parse_release
from abtest.errors import UserError

SERIES_FILE = "series.yaml"
#: the file a build's folder holds its binary in
BUILD_BINARY = "kubelet"
# a series name is a path segment on the node and a semver build-metadata tag in `--version`
_SERIES_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,38}[a-z0-9])?")
# a prefix of a series: its name, then `.p` and how many of its first patches (1-999)
PREFIX = re.compile(r"(?P<series>.+)\.p(?P<count>[1-9][0-9]{0,2})")
_RELEASE_SHAPE = re.compile(r"v?\d{1,3}\.\d{1,3}\.\d{1,3}")


@dataclass(frozen=True)
class BuildName:
    """A kubelet build: a release, or a release plus a series (by name or by folder)."""

    release: Release
    series: str | None = None  # the series' name (the folder's name for a path)
    folder: Path | None = None  # where the series is (None: a plain release)
    prefix: int | None = None  # only the series' first `prefix` patches (None: all of them)

    @property
    def series_name(self) -> str | None:
        """The series as this build carries it: ``agc``, or ``agc.p2`` for a prefix."""
        if self.series is None:
            return None
        return self.series + (f".p{self.prefix}" if self.prefix else "")

    @property
    def name(self) -> str:
        return self.release.version + (f"+{self.series_name}" if self.series else "")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class NodePath:
    """A kubelet binary named by its file on the node (checked by whoever read it)."""

    path: str

    def __str__(self) -> str:
        return self.path


#: what an arm's kubelet is when it is not the node's own: a build by name, or a file
KubeletBinary = BuildName | NodePath


def binary_of_level(text: str, where: str) -> KubeletBinary:
    """A kubelet binary as a checked level holds it (a catalog's kubelet_build level, a
    profile's kubelet.build): a file on the node when it starts with ``/``, else a placed
    build's name, read back into its value."""
    return NodePath(text) if text.startswith("/") else parse_build_name(text, where, paths=False)


def series_root() -> Path:
    """The shipped series (``kubelet-patches/`` in a checkout, ``abtest/kubelet-patches``
    in a wheel)."""
    return data_dir("kubelet-patches")


def parse_build_name(text: str, where: str, *, paths: bool = True) -> BuildName:
    """``v1.36.3``, ``v1.36.3+agc`` (a shipped series, or one placed under that name) or,
    where ``paths``, ``v1.36.3+./folder`` / ``v1.36.3+/abs/folder`` (a user's series)."""
    release_text, plus, series = text.partition("+")
    if not _RELEASE_SHAPE.fullmatch(release_text):
        raise UserError(
            f"{text!r} is neither a kubelet release nor a release+series",
            where,
            "name a release (v1.36.3) or a release and a patch series (v1.36.3+agc"
            + (", or v1.36.3+./my-series for a series folder" if paths else "")
            + ")",
        )
    release = parse_release(release_text, where)  # says why a release-shaped name is refused
    if not plus:
        return BuildName(release)
    if "/" in series:
        return _folder_build(release, series, text, where, paths)
    name = _checked_name(series, text, where)
    prefix = PREFIX.fullmatch(name)
    base = prefix["series"] if prefix else name
    shipped = series_root() / base
    return BuildName(
        release,
        base,
        shipped if (shipped / SERIES_FILE).is_file() else None,
        int(prefix["count"]) if prefix else None,
    )


def _folder_build(release: Release, series: str, text: str, where: str, paths: bool) -> BuildName:
    if not paths:
        raise UserError(
            f"{text!r}: a series folder cannot be named here",
            where,
            "place the build with `abtest lab kubelets RELEASE+./FOLDER`, then name it "
            "RELEASE+FOLDERNAME",
        )
    folder = Path(series).expanduser().resolve()
    name = _checked_name(folder.name, text, where)
    if PREFIX.fullmatch(name):
        raise UserError(
            f"{text!r}: a series folder's name may not end in .pN",
            where,
            "rename the folder: RELEASE+NAME.pN names the first N patches of series NAME",
        )
    return BuildName(release, name, folder)


def _checked_name(name: str, text: str, where: str) -> str:
    if not _SERIES_NAME.fullmatch(name):
        raise UserError(
            f"{text!r}: {name!r} is not a series name",
            where,
            "a series name is 1-40 lower-case letters, digits, '.' and '-', starting and "
            "ending with a letter or digit",
        )
    return name


def build_folder(builds_dir: str, build: BuildName) -> str:
    """Where a build lives on a node whose builds are in ``builds_dir``: the folder
    ``<builds_dir>/<name>``, holding the binary (:data:`BUILD_BINARY`) and, for a patched
    build, its ``source.json``. The one rule: the node reads a build there, the lab places
    it there."""
    return f"{builds_dir.rstrip('/')}/{build.name}"


def build_binary(builds_dir: str, build: BuildName) -> str:
    """The build's kubelet binary on the node: ``<builds_dir>/<name>/kubelet``."""
    return f"{build_folder(builds_dir, build)}/{BUILD_BINARY}"
