"""The pod of a batch, rendered from a jinja2 template (StrictUndefined) into plain dicts.

The shipped template (``templates/pod.yaml.j2``) is the reference workload (``Workload``); a
playbook may name its own template (``workload.template``) that receives the same variables.
Rendering happens before a round starts, so its cost is never inside the timing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jinja2
import yaml

# the labels' home is the cluster layer (the node's sandbox cleanup checks them too); named
# here as well, where a reader of the pod template looks for them
from abtest.cluster.labels import MANAGED_BY as MANAGED_BY
from abtest.cluster.labels import MANAGED_BY_KEY as MANAGED_BY_KEY
from abtest.cluster.labels import ROUND_LABEL as ROUND_LABEL
from abtest.cluster.labels import RUN_LABEL as RUN_LABEL
from abtest.config.domain import Arm
from abtest.config.playbook import Workload
from abtest.errors import ConfigError

TEMPLATES = Path(__file__).resolve().parent / "templates"
DEFAULT_TEMPLATE = TEMPLATES / "pod.yaml.j2"


@dataclass(frozen=True)
class RenderedPod:
    name: str
    body: dict[str, Any]

    def json_bytes(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode()


def pod_labels(run_id: str, round_tag: str) -> dict[str, str]:
    return {MANAGED_BY_KEY: MANAGED_BY, RUN_LABEL: run_id, ROUND_LABEL: round_tag}


def round_selector(round_tag: str) -> str:
    """The label selector naming exactly the pods of one round, and only ones the tool made."""
    return f"{MANAGED_BY_KEY}={MANAGED_BY},{ROUND_LABEL}={round_tag}"


def _environment(path: Path) -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(path.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template(path.name)


def load_template(workload: Workload) -> jinja2.Template:
    path = Path(workload.template) if workload.template else DEFAULT_TEMPLATE
    if not path.is_file():
        raise ConfigError("pod template not found", str(path), "check workload.template")
    try:
        return _environment(path)
    except jinja2.TemplateSyntaxError as exc:
        where = f"{path}:{exc.lineno}"
        raise ConfigError(f"pod template does not parse: {exc.message}", where) from None


def render_pod(
    template: jinja2.Template,
    workload: Workload,
    *,
    name: str,
    namespace: str,
    node_name: str,
    labels: Mapping[str, str],
    index: int = 0,
) -> dict[str, Any]:
    """One pod manifest as a dict; name, namespace and labels are enforced after rendering."""
    variables = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels),
        "annotations": dict(workload.annotations),
        "node_name": node_name,
        "image": workload.image,
        "command": list(workload.command),
        "cpu_request": workload.cpu_request,
        "memory_request": workload.memory_request,
        "cpu_limit": workload.cpu_limit,
        "memory_limit": workload.memory_limit,
        "runtime_class": workload.runtime_class,
        "readiness_probe_command": (
            list(workload.readiness_probe_command) if workload.readiness_probe_command else None
        ),
        "index": index,
    }
    where = str(template.filename or "pod template")
    try:
        text = template.render(**variables)
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"pod template uses an unknown variable: {exc.message}", where) from None
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"rendered pod template is not valid YAML: {exc}", where) from None
    if not isinstance(body, dict) or body.get("kind") != "Pod":
        raise ConfigError("rendered pod template is not a Pod manifest", where)
    # The tool's identity is not the template's to change: cleanup selects on these labels.
    meta = body.setdefault("metadata", {})
    meta["name"] = name
    meta["namespace"] = namespace
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    # An arm's pod part (its pod-spec factors) is what its rounds compare: a template that
    # leaves it out must not silently run every arm alike.
    if workload.annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **dict(workload.annotations)}
    fields = dict(workload.spec_fields)
    if workload.runtime_class:
        fields["runtimeClassName"] = workload.runtime_class
    if fields:
        spec = body.get("spec")
        if not isinstance(spec, dict):
            raise ConfigError("rendered pod template has no spec mapping", where)
        spec.update(fields)
    return body


def arm_workload(workload: Workload, arm: Arm) -> Workload:
    """The workload an arm's pods carry: the playbook's, with the arm's pod part (runtime
    class, annotations, spec fields) over it (``plan.check_crossing`` refuses a factor and the
    workload both setting one of them, so nothing of the playbook's is silently replaced)."""
    if not arm.pod:
        return workload
    annotations = dict(workload.annotations) | dict(arm.annotations)
    return replace(
        workload,
        runtime_class=arm.runtime_class or workload.runtime_class,
        annotations=tuple(sorted(annotations.items())),
        spec_fields=tuple(sorted((dict(workload.spec_fields) | dict(arm.spec_fields)).items())),
    )


def render_batch(
    workload: Workload,
    *,
    size: int,
    namespace: str,
    node_name: str,
    run_id: str,
    round_tag: str,
) -> list[RenderedPod]:
    """``size`` pods named ``abt-<round_tag>-NNNN`` carrying the run, round and tool labels."""
    template = load_template(workload)
    labels = pod_labels(run_id, round_tag)
    pods = []
    for i in range(size):
        name = f"abt-{round_tag}-{i:04d}"
        body = render_pod(
            template,
            workload,
            name=name,
            namespace=namespace,
            node_name=node_name,
            labels=labels,
            index=i,
        )
        pods.append(RenderedPod(name, body))
    return pods
