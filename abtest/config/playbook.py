"""Playbooks (experiment plans) and node profiles (how to reach and handle a node)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from abtest.config import datafiles
from abtest.config import numbers as num
from abtest.config.domain import design_choices, design_problem
from abtest.config.k8s_names import (
    ANNOTATION_TODO,
    NODE_NAME_TODO,
    NODE_PATH_TODO,
    RUNTIME_CLASS_TODO,
    annotation_key_problem,
    image_problem,
    namespace_problem,
    node_name_problem,
    node_path_problem,
    runtime_class_problem,
)
from abtest.config.kubelet_series import parse_build_name
from abtest.config.margin import MARGIN_TODO, margin_problem
from abtest.config.ssh_names import host_problem, port_problem, user_problem
from abtest.config.whole import whole
from abtest.config.yaml_checks import Fields, yaml_mapping
from abtest.config.yaml_input import read_text
from abtest.errors import UserError

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
        generator_keys = {"qps", "concurrency", "timeout_s", "observe_s"}
        gen = {k: given.pop(k) for k in list(given) if k in generator_keys}
        out = replace(self, **given) if given else self  # type: ignore[arg-type]
        if gen:
            out = replace(out, generator=replace(out.generator, **gen))  # type: ignore[arg-type]
        return out


@dataclass(frozen=True)
class SSHTarget:
    host: str
    port: int | None
    user: str | None
    key_file: str | None
    use_agent: bool
    known_hosts: str | None
    config_file: str | None


@dataclass(frozen=True)
class NodeProfile:
    """How to reach and handle one node. Commands run on the node through SSH."""

    name: str
    source: str
    node_name: str
    kubeconfig: str | None
    ssh: SSHTarget
    sudo: bool
    kubelet_config_path: str
    kubelet_binary_path: str
    restart_command: str
    healthz_url: str
    log_command: str | None
    sandbox_count_command: str
    image_present_command: str
    lock_path: str
    health_timeout_s: float
    text: str = ""
    #: a command that exits 0 while the kubelet runs (lets a failed start fail fast)
    status_command: str | None = None
    # Cleanup: list the stopped sandboxes of a namespace, and remove sandboxes by id. Empty
    # means "wait for the kubelet's own container GC" (up to a minute a round).
    stopped_sandboxes_command: str | None = None
    sandbox_remove_command: str | None = None
    # Runtime arms (runtime_class factors): the runtime's handler names (``crictl info`` JSON)
    # and one round's sandboxes with their handlers (``crictl pods -o json``); without them an
    # arm with a runtime class fails before its first batch (nothing could prove its runtime)
    runtime_handlers_command: str | None = None
    sandbox_handlers_command: str | None = None
    # The runtime's start of each container in the namespace (``crictl inspect`` JSON), read
    # once a round: splits the containers phase at the runtime start (None: not split)
    container_starts_command: str | None = None
    # Fast cleanup: list one round's sandboxes (any state) and stop sandboxes by id, so the
    # round's pods do not wait out the kubelet's 2 s minimum grace (empty: the kubelet stops them)
    round_sandboxes_command: str | None = None
    sandbox_stop_command: str | None = None
    #: the kubeconfig context to use (None: the kubeconfig's current-context)
    kube_context: str | None = None
    #: a command printing the running kubelet's pid, so pre-flight can read its command line
    #: and drop-in directory (None: the processes whose executable is binary_path)
    pid_command: str | None = None
    #: where kubelet builds placed for kubelet_build arms live on the node: release vX.Y.Z
    #: is the file ``<builds_dir>/vX.Y.Z/kubelet`` (None: arms name paths, not releases)
    kubelet_builds_dir: str | None = None
    #: the kubelet build every sweep on this node runs unless the sweep names another
    #: (``v1.36.3+agc``, placed in builds_dir): the node's kubelet for experiments, its
    #: own binary put back after each (None: the node's own binary)
    kubelet_build: str | None = None

    def build_folder(self, build: str, where: str | None = None) -> str:
        """Where a placed build's name (``v1.35.4``, ``v1.36.3+agc``) is found on the node,
        ``<builds_dir>/<build>``: the one rule of every option and field naming one. UserError
        (naming ``where``, else this profile's file) when the profile has no builds_dir."""
        if self.kubelet_builds_dir is None:
            raise UserError(
                f"kubelet build {build} names a placed build, and profile {self.name} has no "
                "kubelet.builds_dir to find it in",
                where or self.source,
                "set kubelet.builds_dir in the profile (a build is <builds_dir>/BUILD/kubelet),"
                " or name the binary's absolute path on the node",
            )
        return f"{self.kubelet_builds_dir.rstrip('/')}/{build}"


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
    g.only({"qps", "concurrency", "timeout_s", "observe_s"})
    d = Generator()
    return Generator(
        qps=g.number("qps", default=d.qps, rng=num.QPS),
        concurrency=g.integer("concurrency", default=d.concurrency, rng=num.CONCURRENCY),
        timeout_s=g.number("timeout_s", default=d.timeout_s, rng=num.TIMEOUT_S),
        observe_s=g.number("observe_s", default=d.observe_s, rng=num.OBSERVE_S),
    )


_CRICTL = "crictl --timeout 20s"  # within the 30 s abtest gives each node command


def load_profile(name_or_path: str, base: Path | None = None) -> NodeProfile:
    """A node profile under the one rule of every command (:func:`datafiles.resolve_profile`):
    an argument naming an existing file is that file, otherwise a shipped name."""
    return parse_profile(datafiles.resolve_profile(name_or_path, base))


def parse_profile(path: Path) -> NodeProfile:
    text = read_text(path, "node profile")  # once: what is checked is what is stored
    top = Fields(yaml_mapping(text, path), path)
    top.only(
        {
            "profile",
            "description",
            "node_name",
            "kubeconfig",
            "context",
            "ssh",
            "sudo",
            "kubelet",
            "commands",
            "lock_path",
            "health_timeout_s",
        }
    )
    ssh = top.sub("ssh", required=True)
    ssh.only({"host", "port", "user", "key", "agent", "known_hosts", "config", "password"})
    if "password" in ssh.data:
        raise ssh.error("password", "passwords are not accepted in profiles", "use a key or agent")
    kubelet = top.sub("kubelet", required=True)
    kubelet.only(
        {
            "config_path",
            "binary_path",
            "restart_command",
            "healthz_url",
            "log_command",
            "status_command",
            "pid_command",
            "builds_dir",
            "build",
        }
    )
    commands = top.sub("commands")
    commands.only(
        {
            "sandbox_count",
            "image_present",
            "stopped_sandboxes",
            "sandbox_remove",
            "round_sandboxes",
            "sandbox_stop",
            "runtime_handlers",
            "sandbox_handlers",
            "container_starts",
        }
    )
    port = ssh.data.get("port")
    if port is not None and (problem := port_problem(port)):
        raise ssh.error("port", problem, "a TCP port, 1-65535 (or leave it out for 22)")
    for key, check in (("host", host_problem), ("user", user_problem)):
        if key in ssh.data and (problem := check(ssh.data[key])):
            raise ssh.error(key, problem, "give the name as `ssh` takes it")
    lock_path = top.text("lock_path", default="/var/lib/abtest/node.lock")
    if problem := node_path_problem(lock_path):
        raise top.error("lock_path", problem, NODE_PATH_TODO)
    node_name = top.text("node_name", required=True)
    if problem := node_name_problem(node_name):
        raise top.error("node_name", problem, NODE_NAME_TODO)
    _check_removers(commands)
    _check_sandbox_listing(commands)
    _check_handler_listing(commands)
    _check_sandbox_stop(commands)
    for key in ("config_path", "binary_path", "builds_dir"):
        value = kubelet.text(key, required=key != "builds_dir", default="/")
        if problem := node_path_problem(value):
            raise kubelet.error(key, problem, NODE_PATH_TODO)
    # every command runs in a shell on the node: given, it is not empty, NUL or CR
    for key in ("log_command", "status_command", "pid_command"):
        kubelet.command(key)
    for key in ("sandbox_count", "image_present", "runtime_handlers", "sandbox_handlers"):
        commands.command(key)
    if "{namespace}" not in (commands.command("container_starts") or "{namespace}"):
        raise commands.error(
            "container_starts",
            "has no {namespace} placeholder: it must list only the tool's namespace",
            "print `crictl inspect -q` of the containers labelled "
            "io.kubernetes.pod.namespace={namespace} (see docs/reports.md)",
        )
    return NodeProfile(
        name=top.text("profile", default=path.stem),
        source=str(path),
        node_name=node_name,
        kubeconfig=_expand(top.opt_text("kubeconfig")),
        kube_context=top.opt_text("context"),
        ssh=SSHTarget(
            host=ssh.text("host", required=True),
            port=port,
            user=ssh.opt_text("user"),
            key_file=_expand(ssh.opt_text("key")),
            use_agent=ssh.flag("agent", default=True),
            known_hosts=_expand(ssh.opt_text("known_hosts")),
            config_file=_expand(ssh.opt_text("config")),
        ),
        sudo=top.flag("sudo", default=True),
        kubelet_config_path=kubelet.text("config_path", required=True),
        kubelet_binary_path=kubelet.text("binary_path", required=True),
        restart_command=kubelet.command("restart_command") or "systemctl restart kubelet",
        healthz_url=kubelet.text("healthz_url", default="http://127.0.0.1:10248/healthz"),
        log_command=kubelet.opt_text("log_command"),
        # crictl's own 2 s RPC deadline expires on a busy runtime right after a large round
        sandbox_count_command=commands.text("sandbox_count", default=f"{_CRICTL} pods -q"),
        image_present_command=commands.text(
            "image_present", default=f"{_CRICTL} inspecti -q {{image}}"
        ),
        lock_path=lock_path,
        health_timeout_s=top.number("health_timeout_s", default=120.0, rng=num.HEALTH_TIMEOUT_S),
        text=text,
        status_command=kubelet.opt_text("status_command"),
        pid_command=kubelet.opt_text("pid_command"),
        kubelet_builds_dir=kubelet.opt_text("builds_dir"),
        kubelet_build=_build(kubelet),
        stopped_sandboxes_command=commands.opt_text("stopped_sandboxes"),
        sandbox_remove_command=commands.opt_text("sandbox_remove"),
        runtime_handlers_command=commands.opt_text("runtime_handlers"),
        sandbox_handlers_command=commands.opt_text("sandbox_handlers"),
        container_starts_command=commands.opt_text("container_starts"),
        round_sandboxes_command=commands.opt_text("round_sandboxes"),
        sandbox_stop_command=commands.opt_text("sandbox_stop"),
    )


def _check_removers(commands: Fields) -> None:
    """ "Only our sandboxes": a removing or stopping command acts on the ids abtest checked,
    never on everything (`crictl rmp --all --force` would take other workloads' sandboxes)."""
    for key in ("sandbox_remove", "sandbox_stop"):
        command = commands.command(key)
        if command is not None and "{ids}" not in command:
            raise commands.error(
                key,
                "has no {ids} placeholder: it would not be limited to the sandboxes abtest "
                "checked are its own",
                f"use `crictl {'rmp' if key == 'sandbox_remove' else 'stopp'} {{ids}}`",
            )


def _check_sandbox_listing(commands: Fields) -> None:
    """The old ``crictl pods -q --namespace {namespace}`` form printed bare ids, and
    ``--namespace`` is an unanchored regular expression: refuse it with what to write now."""
    listing = commands.opt_text("stopped_sandboxes")
    if listing and ({"-q", "--quiet"} & set(listing.split())):
        raise commands.error(
            "stopped_sandboxes",
            "prints bare sandbox ids (-q); abtest now checks each sandbox's namespace and "
            "tool labels itself and needs crictl's JSON",
            "use `crictl pods --state notready -o json` (optionally with --label filters), "
            "see playbooks/nodes/kubeadm-systemd.yaml",
        )


def _check_sandbox_stop(commands: Fields) -> None:
    """``round_sandboxes`` and ``sandbox_stop`` go together, with ``sandbox_remove``; the
    listing prints JSON of every state (abtest checks labels and state itself) and the stop
    command takes the checked ids."""
    listing = commands.opt_text("round_sandboxes")
    stop = commands.opt_text("sandbox_stop")
    if not (listing or stop):
        return
    if not listing or not stop:
        present, missing = (
            ("round_sandboxes", "sandbox_stop") if listing else ("sandbox_stop", "round_sandboxes")
        )
        raise commands.error(
            present,
            f"set without `{missing}`: the fast cleanup needs both",
            f"add `{missing}` (see playbooks/nodes/kubeadm-systemd.yaml) or remove both",
        )
    if not commands.opt_text("sandbox_remove"):
        raise commands.error(
            "sandbox_stop",
            "set without `sandbox_remove`: stopped sandboxes would stay until the kubelet's GC",
            "add `sandbox_remove: crictl rmp {ids}`",
        )
    words = set(listing.split())
    if {"-q", "--quiet"} & words or "json" not in listing:
        raise commands.error(
            "round_sandboxes",
            "must print crictl's JSON (`-o json`): abtest checks each sandbox's namespace, "
            "tool and round labels itself",
            "use `crictl pods -o json --label abtest/round={round}`",
        )
    if "--state" in words or any(w.startswith("--state=") for w in words):
        raise commands.error(
            "round_sandboxes",
            "filters by state; the fast cleanup needs the round's running and stopped sandboxes",
            "drop --state",
        )
    if "{ids}" not in stop:
        raise commands.error("sandbox_stop", "has no {ids} placeholder", "use `crictl stopp {ids}`")


def _check_handler_listing(commands: Fields) -> None:
    """``sandbox_handlers`` must print crictl's JSON of every state (abtest checks each
    sandbox's namespace, tool and round labels itself and reads its runtimeHandler)."""
    listing = commands.opt_text("sandbox_handlers")
    if listing is None:
        return
    words = set(listing.split())
    if {"-q", "--quiet"} & words or "json" not in listing or "--state" in listing:
        raise commands.error(
            "sandbox_handlers",
            "must print crictl's JSON of the round's sandboxes in any state (`-o json`, no -q, "
            "no --state): abtest checks each sandbox's labels and reads its runtimeHandler",
            "use `crictl pods -o json --label io.kubernetes.pod.namespace={namespace} "
            "--label abtest/round={round}`",
        )


def _expand(value: str | None) -> str | None:
    return str(Path(value).expanduser()) if value else None


def _build(kubelet: Fields) -> str | None:
    """``kubelet.build``: a placed build's name, which needs a builds_dir to be found in."""
    value = kubelet.opt_text("build")
    if value is None:
        return None
    name = parse_build_name(value, kubelet.where("build"), paths=False).name
    if kubelet.opt_text("builds_dir") is None:
        raise kubelet.error("build", "a build is found in kubelet.builds_dir, which is not set")
    return name
