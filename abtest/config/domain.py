"""Plain dataclasses for the domain: what a factor, an arm and a setting are."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from abtest.config.whole import whole_match
from abtest.errors import UserError

if TYPE_CHECKING:
    from abtest.config.kinds import FactorKind

Scalar = bool | int | float | str
#: Several KubeletConfiguration paths and their values, in catalog order (a tuple, not a
#: dict, so factors stay hashable).
Settings = tuple[tuple[str, Scalar], ...]
#: None: a feature gate's level that leaves the gate unset (the binary's own default), so a
#: kubelet build that does not know the gate can share the arm.
FactorValue = Scalar | Settings | None
#: A kubelet_build level that means the node's own kubelet binary (no swap).
NODE_KUBELET = "node"

#: Designs a sweep runs whole; gates-all (baseline + singles + combined) and attribution (the
#: same + leave-one-out) are shorthands.
WHOLE_DESIGNS: tuple[str, ...] = ("gates-all", "attribution", "factorial", "screen")
#: Arm sets that "+" joins into one design, e.g. "baseline+singles" (duplicate arms dropped).
DESIGN_PARTS: tuple[str, ...] = (
    "baseline",
    "singles",
    "combined",
    "leave-one-out",
    "factorial",
    "screen",
)


def design_problem(design: str) -> str | None:
    """Why ``design`` names no design, or None: the one check the playbook and the CLI share."""
    if design in WHOLE_DESIGNS:
        return None
    unknown = [p.strip() for p in design.split("+") if p.strip() not in DESIGN_PARTS]
    if unknown:
        return f"unknown design {', '.join(map(repr, unknown))} in {design!r}"
    return None


def design_choices() -> str:
    return (
        "one of "
        + ", ".join(WHOLE_DESIGNS)
        + ", or parts joined by '+': "
        + ", ".join(DESIGN_PARTS)
    )


def show_scalar(value: Scalar | None) -> str:
    if value is None:
        return "unset"
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Factor:
    """A named change: to the node (a kubelet feature gate, one KubeletConfiguration field,
    several fields at once, the kubelet build) or to the pod (its RuntimeClass, an annotation,
    a spec field). What each level changes is its kind's to say (``abtest.config.kinds``)."""

    name: str
    #: a kind's catalog name (``abtest.config.kinds.names()``)
    kind: str
    on: FactorValue
    off: FactorValue
    summary: str
    component: str = "kubelet"
    availability: str = "upstream"
    expected_effect: str = "unknown"
    #: the kind's own parameter, when it has one (pod_annotation: the annotation key)
    param: str | None = None

    @property
    def spec(self) -> FactorKind:
        # imported here: the kinds are built on this module's types
        from abtest.config.kinds import kind

        return kind(self.kind)

    @property
    def is_pod_spec(self) -> bool:
        return self.spec.pod_spec

    @property
    def paths(self) -> tuple[str, ...]:
        """The dotted KubeletConfiguration paths this factor sets (none for a pod-spec one)."""
        return tuple(p for p, _ in self.kubelet_settings(True))

    @property
    def path(self) -> str:
        """The one KubeletConfiguration path of a gate or config_field factor."""
        path = self.spec.kubelet_path(self)
        if path is None:
            raise ValueError(f"factor {self.name} ({self.kind}) has no single kubelet path")
        return path

    @property
    def targets(self) -> tuple[str, ...]:
        """What this factor changes, one name per thing: kubelet paths, ``pod:runtimeClassName``
        or ``pod:annotations/<key>``. Two factors of one design must not share a target."""
        return self.spec.targets(self)

    def value(self, on: bool) -> FactorValue:
        return self.on if on else self.off

    def kubelet_settings(self, on: bool) -> Settings:
        """The kubelet config part of this factor at its on or off level (empty for pod-spec
        kinds, kubelet builds, and a gate level that leaves the gate unset)."""
        return self.spec.kubelet_settings(self, on)

    def show(self, on: bool) -> str:
        """The level as a reader should see it: ``kubeAPIQPS=3, kubeAPIBurst=10``, ``crun``."""
        v = self.value(on)
        if isinstance(v, tuple):
            return ", ".join(f"{p}={show_scalar(x)}" for p, x in v)
        return show_scalar(v)

    def to_json(self) -> dict[str, object]:
        """JSON-ready, with on/off as mappings for kubelet_settings."""
        out: dict[str, object] = {
            "name": self.name,
            "kind": self.kind,
            "on": dict(self.on) if isinstance(self.on, tuple) else self.on,
            "off": dict(self.off) if isinstance(self.off, tuple) else self.off,
            "summary": self.summary,
            "component": self.component,
            "availability": self.availability,
            "expected_effect": self.expected_effect,
            "paths": list(self.paths),
        }
        if (path := self.spec.kubelet_path(self)) is not None:
            out["path"] = path
        if self.param is not None and self.spec.param is not None:
            out[self.spec.param] = self.param
        return out


@dataclass(frozen=True)
class Catalog:
    name: str
    source: str
    description: str
    factors: tuple[Factor, ...]

    def get(self, name: str) -> Factor:
        for f in self.factors:
            if f.name == name:
                return f
        raise KeyError(name)


#: An arm's pod part: record keys and values. ``pod.annotations.<key>`` is a metadata
#: annotation; any other ``pod.<field>`` is the top-level pod spec field ``<field>``.
PodPart = tuple[tuple[str, Scalar], ...]
RUNTIME_CLASS_KEY = "pod.runtimeClassName"
ANNOTATION_PREFIX = "pod.annotations."


@dataclass(frozen=True)
class Arm:
    """One configuration: which factors are on (every other factor is off). Its kubelet part
    (``settings``, ``kubelet_binary``) is applied to the node; its pod part (``pod``) is
    rendered into every pod of its rounds."""

    name: str
    on: frozenset[str]
    settings: Settings = field(default=())
    # A kubelet binary (a file on the node) installed for this arm; None: the node's own.
    kubelet_binary: str | None = None
    #: what the arm's pods carry over the workload's own (``pod.runtimeClassName``, ...)
    pod: PodPart = ()

    def settings_dict(self) -> dict[str, Scalar]:
        return dict(self.settings)

    @property
    def kubelet_key(self) -> tuple[tuple[tuple[str, Scalar], ...], str | None]:
        """What the node must run for this arm; two visits with the same key need no restart
        between them."""
        return tuple(sorted(self.settings, key=lambda kv: kv[0])), self.kubelet_binary

    @property
    def runtime_class(self) -> str | None:
        """The pods' spec.runtimeClassName (None: the workload's own)."""
        value = dict(self.pod).get(RUNTIME_CLASS_KEY)
        return None if value is None else str(value)

    @property
    def annotations(self) -> tuple[tuple[str, str], ...]:
        """Pod annotations set by the arm, over the workload's own."""
        return tuple(
            (k.removeprefix(ANNOTATION_PREFIX), str(v))
            for k, v in self.pod
            if k.startswith(ANNOTATION_PREFIX)
        )

    @property
    def spec_fields(self) -> tuple[tuple[str, Scalar], ...]:
        """Top-level pod spec fields set by the arm, beyond the runtime class."""
        return tuple(
            (k.removeprefix("pod."), v)
            for k, v in self.pod
            if k != RUNTIME_CLASS_KEY and not k.startswith(ANNOTATION_PREFIX)
        )

    def pod_dict(self) -> dict[str, Scalar]:
        """The pod part for records and labels: ``pod.runtimeClassName``,
        ``pod.annotations.<key>``, ``pod.<field>``."""
        return dict(self.pod)


@dataclass(frozen=True)
class ArmParts:
    settings: Settings
    pod: PodPart
    #: the kubelet build the arm runs (a release or a path on the node); None: the node's own
    kubelet_binary: str | None = None


def arm_parts(on: Iterable[str], factors: Sequence[Factor]) -> ArmParts:
    """The kubelet settings, kubelet build and pod part of the configuration turning ``on``
    on and every other factor explicitly off."""
    on_set = frozenset(on)
    settings: list[tuple[str, Scalar]] = []
    pod: list[tuple[str, Scalar]] = []
    builds_on: list[str] = []
    build_off: str | None = None
    for f in factors:
        level = f.name in on_set
        settings.extend(f.spec.kubelet_settings(f, level))
        pod.extend(f.spec.pod_part(f, level))
        # builds are levels of one choice with one off level, and an arm turns on one at
        # most (the kind checks both): the one turned on, else that off level
        if (build := f.spec.kubelet_build(f, level)) is not None:
            if level:
                builds_on.append(build)
            else:
                build_off = build
    build = builds_on[0] if builds_on else build_off
    binary = None if build in (None, NODE_KUBELET) else build
    return ArmParts(tuple(settings), tuple(pod), binary)


# --------------------------------------------------------------------- kubelet releases

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
