"""Which kubelet an arm runs, and what that binary is: read over SSH before anything changes.

A kubelet_build arm names a release the node has placed (``v1.35.4``: the file
``<kubelet.builds_dir>/v1.35.4/kubelet``) or a path on the node; an arm without one runs the
node's own binary. Before the first change of a sweep, every arm's binary is read: its
version (``kubelet --version``) and the feature gates it lets a config set (the
``--feature-gates`` list of ``kubelet --help``, which names every alpha and beta gate of that
build; GA and deprecated gates are not listed, and a GA gate is locked on in most releases).
An arm that sets a gate its binary does not list, or a binary the API server's version does
not allow (the version-skew policy), is refused naming the arm, the binary, its version and
the gate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from abtest.config.build_names import BuildName, KubeletBinary, NodePath, binary_of_level
from abtest.config.domain import Arm, Release, build_version_of, release_of, skew_problem
from abtest.config.json_object import json_object
from abtest.config.playbook import NodeProfile
from abtest.node.binary import check_path
from abtest.node.session import NodeSession

# `--feature-gates mapStringBool   A set of key=value pairs ... Options are:\n
#      APIResponseCompression=true|false (BETA - default=true)\n ...`
_GATE_LINE = re.compile(r"^\s+([A-Z][A-Za-z0-9]+)=true\|false \(", re.M)


@dataclass(frozen=True)
class KubeletBuild:
    """One kubelet binary on the node, as read from itself."""

    path: str
    version_text: str
    release: Release | None
    gates: frozenset[str]
    #: a patched build's source.json beside the binary (release, series, each patch's
    #: sha256); None for a release or a binary placed by hand
    source: dict[str, Any] | None = None

    @property
    def version(self) -> str:
        return build_version_of(self.version_text) or self.version_text or "unknown"

    def record(self) -> dict[str, Any]:
        """What the run stores about the build an arm ran."""
        return {
            "path": self.path,
            "version": self.version,
            **({"source": self.source} if self.source else {}),
        }


def build_path(value: KubeletBinary | str | None, profile: NodeProfile) -> str | None:
    """The file on the node an arm's kubelet is (None: the node's own binary): a file named
    by its path, or a placed build where the profile's builds_dir holds it. A text is read
    as a catalog's kubelet_build level is (a path, else a build's name)."""
    if isinstance(value, str):
        value = binary_of_level(value, "kubelet_build")
    if value is None:
        return None
    if isinstance(value, NodePath):
        return check_path(value.path, "kubelet_build")
    return check_path(profile.build_binary(value), "builds_dir")


def read_build(session: NodeSession, path: str) -> KubeletBuild | None:
    """The binary's version and known gates; None when it is missing or does not run."""
    exists = session.run(["test", "-f", path, "-a", "-x", path], timeout=20)
    if not exists.ok:
        return None
    version = session.run([path, "--version"], timeout=60)
    if not version.ok:
        return None
    text = version.stdout.strip()
    helped = session.run([path, "--help"], timeout=60)
    # cobra prints the usage on stdout; older builds wrote it to stderr
    gates = frozenset(_GATE_LINE.findall(helped.stdout + helped.stderr))
    return KubeletBuild(path, text, release_of(text), gates, _read_source(session, path))


def _read_source(session: NodeSession, path: str) -> dict[str, Any] | None:
    """The source.json `abtest lab kubelets` places beside a patched build (None: absent or
    not a JSON object; it is a record, never trusted for anything but the report)."""
    found = session.run(["cat", f"{path.rsplit('/', 1)[0]}/source.json"], timeout=20)
    if not found.ok or len(found.stdout) > 64_000:
        return None
    return json_object(found.stdout)


def arm_problems(
    arms: Sequence[Arm],
    profile: NodeProfile,
    builds: Mapping[str | None, KubeletBuild | None],
    api_server: str | None,
) -> list[str]:
    """Why an arm of this sweep cannot run on this node: its binary is missing, not allowed
    under this API server, or does not know a gate the arm sets. ``builds`` maps each arm's
    resolved binary path (None: the node's own, checked through the running kubelet instead)
    to what was read from it."""
    problems: list[str] = []
    server = release_of(api_server or "")
    for arm in arms:
        if arm.kubelet is None:
            continue
        path = build_path(arm.kubelet, profile)
        build = builds.get(path)
        if build is None:
            hint = (
                f"place it with `abtest lab kubelets {arm.kubelet}`"
                if isinstance(arm.kubelet, BuildName)
                and profile.kubelet_builds_dir
                and profile.kubelet_builds_dir.startswith("/var/lib/abtest-lab/")
                else "copy an executable kubelet there"
                + (
                    ", or set kubelet.place_builds: true in the profile and abtest uploads it"
                    if isinstance(arm.kubelet, BuildName) and not profile.place_builds
                    else ""
                )
            )
            problems.append(
                f"arm {arm.name}: kubelet build {arm.kubelet} ({path}) does not exist on "
                f"{profile.node_name}, is not executable, or does not run `--version` ({hint})"
            )
            continue
        if build.release is None:
            problems.append(
                f"arm {arm.name}: {path} reports no Kubernetes version ({build.version_text!r})"
            )
        elif server is not None:
            skew = skew_problem(build.release, server)
            if skew:
                problems.append(f"arm {arm.name}: {path}: {skew}")
        for gate in sorted(p.split(".", 1)[1] for p, _ in arm.settings if _is_gate(p)):
            if gate not in build.gates:
                problems.append(
                    f"arm {arm.name} sets feature gate {gate}, which kubelet {build.version} "
                    f"({path}) does not list in --help (unknown to that build, or GA and locked)"
                )
    return problems


def _is_gate(path: str) -> bool:
    return path.startswith("featureGates.")
