"""Kubernetes releases: what the lab and a kubelet_build factor name (``v1.36.3``), the oldest
one the lab supports, and the version-skew policy between a kubelet and its API server."""

from __future__ import annotations

import re
from dataclasses import dataclass

from abtest.config.full_match import whole_match
from abtest.errors import UserError

_VERSION = re.compile(r"v?(?P<major>1)\.(?P<minor>\d{1,3})\.(?P<patch>\d{1,3})")
# The oldest release the lab's files (kubelet config fields, API server flags) are made for.
MINIMUM = (1, 34)
# The kubelet may be up to this many minors older than the API server, never newer
# (https://kubernetes.io/releases/version-skew-policy/#kubelet).
KUBELET_SKEW_MINORS = 3


@dataclass(frozen=True, order=True)
class Release:
    major: int
    minor: int
    patch: int

    @property
    def version(self) -> str:
        return f"v{self.major}.{self.minor}.{self.patch}"

    @property
    def staging(self) -> str:
        """The version of the ``k8s.io/*`` staging modules that ship with this release."""
        return f"v0.{self.minor}.{self.patch}"

    def __str__(self) -> str:
        return self.version


def parse_release(text: str, where: str = "--kubernetes") -> Release:
    """A release from ``v1.36.3`` (or ``1.36.3``); anything else is one clear error."""
    value = text
    found = whole_match(_VERSION, value)  # " v1.36.3\n" is a mistake to say, not to mend
    if found is None:
        raise UserError(
            f"{value!r} is not a Kubernetes release",
            where,
            "name a final release as upstream tags it, e.g. v1.36.3; no -alpha, -beta or -rc",
        )
    release = Release(int(found["major"]), int(found["minor"]), int(found["patch"]))
    if (release.major, release.minor) < MINIMUM:
        raise UserError(
            f"{release.version} is older than the lab supports",
            where,
            f"choose v{MINIMUM[0]}.{MINIMUM[1]}.0 or newer, e.g. v1.34.4 (the reference's minor)",
        )
    return release


def release_of(version_text: str) -> Release | None:
    """The release a kubelet reports (``Kubernetes v1.36.3``, a nodeInfo.kubeletVersion
    ``v1.36.3``, or ``v1.36.3-vendor.1``); None when the text names none."""
    found = re.search(r"v(\d+)\.(\d+)\.(\d+)", version_text)
    if found is None:
        return None
    return Release(int(found[1]), int(found[2]), int(found[3]))


_BUILD_VERSION = re.compile(r"v\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]*)?")


def build_version_of(version_text: str) -> str | None:
    """The whole version a kubelet reports, build metadata included (``v1.36.3+agc`` from
    ``Kubernetes v1.36.3+agc``): a patched build differs from its release only there."""
    found = _BUILD_VERSION.search(version_text)
    return found.group(0) if found else None


def skew_problem(kubelet: Release, api_server: Release) -> str | None:
    """Why this kubelet may not run under this API server, or None when the policy allows it."""
    if (kubelet.major, kubelet.minor) > (api_server.major, api_server.minor):
        return (
            f"kubelet {kubelet} is newer than the API server {api_server}; the version-skew "
            "policy never allows a kubelet newer than the control plane"
        )
    if api_server.minor - kubelet.minor > KUBELET_SKEW_MINORS:
        return (
            f"kubelet {kubelet} is more than {KUBELET_SKEW_MINORS} minors older than the API "
            f"server {api_server}; the version-skew policy does not allow it"
        )
    return None
