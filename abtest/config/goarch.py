"""A node's CPU architecture in Go's words (``GOARCH``): what a kubelet build for it is built
with, and the key its build is cached under on the controller.

A node says its architecture as ``uname -m`` does (``x86_64``, ``aarch64``); Go and the
Kubernetes release artifacts name the same machines ``amd64``, ``arm64``. A build for the
controller's own architecture is cached where the lab has always cached it (no suffix); a
build for another architecture carries the GOARCH in its cache key, so an amd64 controller
can hold an amd64 and an arm64 kubelet of one release side by side.
"""

from __future__ import annotations

import platform

from abtest.errors import UserError

#: ``uname -m`` -> GOARCH, for the architectures Kubernetes releases a kubelet for
MACHINE_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv8l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}
GOARCHES = frozenset(MACHINE_GOARCH.values())


def goarch_of_machine(machine: str, where: str) -> str:
    """The GOARCH of a machine ``uname -m`` names; a UserError for one Kubernetes does not
    release a kubelet for (naming ``where`` the answer came from)."""
    found = MACHINE_GOARCH.get(machine.strip())
    if found is None:
        raise UserError(
            f"the node's architecture {machine.strip()[:40]!r} (uname -m) is not one a kubelet "
            "is built for",
            where,
            "use a node of " + ", ".join(sorted(GOARCHES)) + ", or place the build by hand",
        )
    return found


def checked_goarch(text: str, where: str) -> str:
    """A GOARCH given by a user (``--goarch``): one of :data:`GOARCHES`."""
    if text not in GOARCHES:
        raise UserError(
            f"{text[:40]!r} is not a GOARCH a kubelet is built for",
            where,
            "give one of " + ", ".join(sorted(GOARCHES)),
        )
    return text


def native_goarch() -> str:
    """The controller's own GOARCH (what ``go build`` makes without ``GOARCH``)."""
    return MACHINE_GOARCH.get(platform.machine(), platform.machine().lower())


def cache_suffix(goarch: str | None) -> str:
    """The cache key's suffix for a build for ``goarch``: none for the controller's own
    architecture (the key every earlier build has), ``-<goarch>`` for another."""
    return "" if goarch is None or goarch == native_goarch() else f"-{goarch}"
