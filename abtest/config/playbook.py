"""Playbooks: experiment plans (workload, generator, sizes, rounds, margin). The node profiles
they run on are abtest.config.node_profile's."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from abtest.config import datafiles
from abtest.config import numbers as num
from abtest.config.domain import design_choices, design_problem
from abtest.config.full_match import whole
from abtest.config.k8s_names import (
    ANNOTATION_TODO,
    RUNTIME_CLASS_TODO,
    annotation_key_problem,
    image_problem,
    namespace_problem,
    runtime_class_problem,
)
from abtest.config.margin import MARGIN_TODO, margin_problem

# node profiles have their own module; named here too, where older code imports them
from abtest.config.node_profile import NodeProfile as NodeProfile
from abtest.config.node_profile import SSHTarget as SSHTarget
from abtest.config.node_profile import load_profile as load_profile
from abtest.config.node_profile import parse_profile as parse_profile
from abtest.config.yaml_checks import Fields, yaml_mapping
from abtest.config.yaml_input import read_text

QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?")


@dataclass(frozen=True)
class Workload:
    """The pod of the reference method (docs/designs.md: ``playbooks/agc-sweep.yaml``)."""

    image: str = "docker.io/library/busybox:1.36.1"
    command: tuple[str, ...] = ("sleep", "3600")
    cpu_request: str = "100m"
    memory_request: str = "1Mi"
    cpu_limit: str = "2"
    memory_limit: str = "128Mi"
    runtime_class: str | None = None
    annotations: tuple[tuple[str, str], ...] = ()
    readiness_probe_command: tuple[str, ...] | None = None
    template: str | None = None
    #: top-level pod spec fields set over the rendered pod (an arm's pod_field factors)
    spec_fields: tuple[tuple[str, bool | int | float | str], ...] = ()


@dataclass(frozen=True)
class Generator:
    qps: float = 1000.0
    concurrency: int = 150
    timeout_s: float = 300.0
    observe_s: float = 10.0
    # each round's first create waits a random 0..start_dither_s after the watch opens, so
    # the batch starts at a uniform phase of the kubelet's 1 s relist: without it a run's
    # rounds start at much the same phase, and a change in work shows up as 0 or a whole
    # tick (docs/statistics.md, "The start phase")
    start_dither_s: float = 1.0

    def with_overrides(self, **changes: float | None) -> Generator:
        """Flags override the generator (the playbook's, or these defaults); None means "not
        given"."""
        given = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **given) if given else self  # type: ignore[arg-type]


@dataclass(frozen=True)
class Playbook:
    name: str
    source: str
    catalog: str
    design: str
    factors: tuple[str, ...]
    sizes: tuple[int, ...]
    rounds: int
    seed: int
    warmup: bool
    namespace: str
    profile: str | None
    workload: Workload = field(default_factory=Workload)
    generator: Generator = field(default_factory=Generator)
    metrics: tuple[str, ...] = ("batch_ready_s", "p50_s", "p95_s", "p99_s")
    margin_pct: float = 5.0
    max_rounds: int = 20
    confidence: float = 0.95
    text: str = ""

    def with_overrides(self, **changes: object) -> Playbook:
        """Flags override the playbook; None means "not given"."""
        given = {k: v for k, v in changes.items() if v is not None}
        generator_keys = {"qps", "concurrency", "timeout_s", "observe_s", "start_dither_s"}
        gen = {k: given.pop(k) for k in list(given) if k in generator_keys}
        out = replace(self, **given) if given else self  # type: ignore[arg-type]
        if gen:
            out = replace(out, generator=out.generator.with_overrides(**gen))  # type: ignore[arg-type]
        return out


def load_playbook(name_or_path: str) -> Playbook:
    path = datafiles.resolve("playbooks", name_or_path)
    return parse_playbook(path)


def parse_playbook(path: Path) -> Playbook:
    text = read_text(path, "playbook")  # once: what is checked is what is stored
    top = Fields(yaml_mapping(text, path), path)
    top.only(
        {
            "playbook",
            "description",
            "catalog",
            "design",
            "factors",
            "sizes",
            "rounds",
            "seed",
            "warmup",
            "namespace",
            "profile",
            "workload",
            "generator",
            "metrics",
            "margin_pct",
            "max_rounds",
            "confidence",
        }
    )
    design = top.text("design", default="gates-all")
    if problem := design_problem(design):
        raise top.error("design", problem, "use " + design_choices())
    namespace = top.text("namespace", default="abtest")
    if problem := namespace_problem(namespace):
        raise top.error("namespace", problem, "use a DNS-1123 label")
    confidence = top.number("confidence", default=0.95)
    if problem := num.confidence_problem(confidence):
        raise top.error("confidence", problem)
    metrics = top.str_list("metrics", default=["batch_ready_s", "p50_s", "p95_s", "p99_s"])
    for m in metrics:
        if m not in ("batch_ready_s", "p50_s", "p95_s", "p99_s"):
            raise top.error(
                "metrics", f"unknown metric {m!r}", "batch_ready_s, p50_s, p95_s, p99_s"
            )
    return Playbook(
        name=top.text("playbook", default=path.stem),
        source=str(path),
        catalog=top.text("catalog", required=True),
        design=design,
        factors=tuple(top.str_list("factors", default=[])),
        sizes=_sizes(top),
        rounds=top.integer("rounds", default=5, rng=num.ROUNDS),
        seed=top.integer("seed", default=1, rng=num.SEED),
        warmup=top.flag("warmup", default=True),
        namespace=namespace,
        profile=top.opt_text("profile"),
        workload=_parse_workload(top.sub("workload")),
        generator=_parse_generator(top.sub("generator")),
        metrics=tuple(metrics),
        margin_pct=_margin(top),
        max_rounds=top.integer("max_rounds", default=20, rng=num.MAX_ROUNDS),
        confidence=confidence,
        text=text,
    )


def _sizes(top: Fields) -> tuple[int, ...]:
    sizes = top.int_list("sizes", default=[50, 100, 150], rng=num.SIZE)
    if len(sizes) > num.MAX_SIZES:
        raise top.error("sizes", f"{len(sizes)} sizes, more than {num.MAX_SIZES}")
    return tuple(sizes)


def _margin(top: Fields) -> float:
    """margin_pct under the one rule `abtest regress --margin` uses too."""
    value = top.number("margin_pct", default=5.0)
    problem = margin_problem(value)
    if problem is not None:
        raise top.error("margin_pct", problem, MARGIN_TODO)
    return value


def _parse_workload(w: Fields) -> Workload:
    w.only(
        {
            "image",
            "command",
            "requests",
            "limits",
            "runtime_class",
            "annotations",
            "readiness_probe_command",
            "template",
        }
    )
    requests = w.sub("requests")
    limits = w.sub("limits")
    requests.only({"cpu", "memory"})
    limits.only({"cpu", "memory"})
    d = Workload()
    quantities = {
        "cpu_request": (requests, "cpu", d.cpu_request),
        "memory_request": (requests, "memory", d.memory_request),
        "cpu_limit": (limits, "cpu", d.cpu_limit),
        "memory_limit": (limits, "memory", d.memory_limit),
    }
    values: dict[str, Any] = {}  # the resource strings, by Workload field
    for attr, (section, key, default) in quantities.items():
        raw = section.data.get(key, default)
        text = str(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else raw
        if not whole(QUANTITY, text):
            raise section.error(key, f"invalid resource quantity {raw!r}", "e.g. 100m, 2, 128Mi")
        values[attr] = text
    probe = w.str_list("readiness_probe_command", default=[])
    template = w.opt_text("template")
    template_path = (w.path.parent / template).resolve() if template else None
    # found now, not when the first round renders its pods after the kubelet was reconfigured
    if template_path is not None and not template_path.is_file():
        raise w.error("template", f"pod template {template_path} not found", "check the path")
    runtime_class = w.opt_text("runtime_class")
    if runtime_class is not None and (problem := runtime_class_problem(runtime_class)):
        raise w.error("runtime_class", problem, RUNTIME_CLASS_TODO)
    annotations = w.str_map("annotations")
    for key in annotations:
        if problem := annotation_key_problem(key):
            raise w.error("annotations", problem, ANNOTATION_TODO)
    image = w.text("image", default=d.image)
    if problem := image_problem(image):
        raise w.error("image", problem, "e.g. docker.io/library/busybox:1.36.1")
    return Workload(
        image=image,
        command=tuple(w.str_list("command", default=list(d.command))),
        runtime_class=runtime_class,
        annotations=tuple(sorted(annotations.items())),
        readiness_probe_command=tuple(probe) if probe else None,
        template=str(template_path) if template_path else None,
        **values,
    )


def _parse_generator(g: Fields) -> Generator:
    g.only({"qps", "concurrency", "timeout_s", "observe_s", "start_dither_s"})
    d = Generator()
    return Generator(
        qps=g.number("qps", default=d.qps, rng=num.QPS),
        concurrency=g.integer("concurrency", default=d.concurrency, rng=num.CONCURRENCY),
        timeout_s=g.number("timeout_s", default=d.timeout_s, rng=num.TIMEOUT_S),
        observe_s=g.number("observe_s", default=d.observe_s, rng=num.OBSERVE_S),
        start_dither_s=g.number("start_dither_s", default=d.start_dither_s, rng=num.START_DITHER_S),
    )
