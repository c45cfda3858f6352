"""Plain dataclasses for the domain: what a factor, an arm and a setting are."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

# the level types live beneath both this module and the kinds; named here too, where a
# reader of the domain looks for them
from abtest.config.build_names import KubeletBinary, binary_of_level
from abtest.config.factor_levels import NODE_KUBELET as NODE_KUBELET
from abtest.config.factor_levels import FactorValue as FactorValue
from abtest.config.factor_levels import PodPart as PodPart
from abtest.config.factor_levels import Scalar as Scalar
from abtest.config.factor_levels import Settings as Settings
from abtest.config.kinds import FactorKind, kind

# kubelet releases have their own module (the kinds read them, beneath this one); named here
# too, where code that predates it imports them
from abtest.config.releases import KUBELET_SKEW_MINORS as KUBELET_SKEW_MINORS
from abtest.config.releases import MINIMUM as MINIMUM
from abtest.config.releases import Release as Release
from abtest.config.releases import build_version_of as build_version_of
from abtest.config.releases import parse_release as parse_release
from abtest.config.releases import release_of as release_of
from abtest.config.releases import skew_problem as skew_problem

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


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


def by_name(items: Iterable[_N], name: str) -> _N:
    """The item called ``name`` among factors or arms (each name used once); KeyError if none."""
    for item in items:
        if item.name == name:
            return item
    raise KeyError(name)


@dataclass(frozen=True)
class Catalog:
    name: str
    source: str
    description: str
    factors: tuple[Factor, ...]

    def get(self, name: str) -> Factor:
        return by_name(self.factors, name)


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
    #: the kubelet binary installed for this arm (a placed build, or a file on the node);
    #: None: the node's own
    kubelet: KubeletBinary | None = None
    #: what the arm's pods carry over the workload's own (``pod.runtimeClassName``, ...)
    pod: PodPart = ()

    @property
    def kubelet_binary(self) -> str | None:
        """The arm's kubelet as a record, the plan and the report write it (a build's name or
        the file's path); None: the node's own."""
        return None if self.kubelet is None else str(self.kubelet)

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
    #: the kubelet build the arm runs (a placed build or a path on the node); None: the node's own
    kubelet: KubeletBinary | None = None


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
    binary = None if build is None or build == NODE_KUBELET else binary_of_level(build, "factor")
    return ArmParts(tuple(settings), tuple(pod), binary)
