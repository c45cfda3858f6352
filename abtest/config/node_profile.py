"""Node profiles: how to reach one node (SSH) and handle it (its kubelet's files and service,
its container runtime's commands), read from a profile YAML file."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from abtest.config import datafiles
from abtest.config import numbers as num
from abtest.config.build_names import BuildName, build_binary, parse_build_name
from abtest.config.k8s_names import (
    NODE_NAME_TODO,
    NODE_PATH_TODO,
    node_name_problem,
    node_path_problem,
)
from abtest.config.pod_transport import PodTarget, check_sections, pod_target, transport_of
from abtest.config.ssh_names import host_problem, port_problem, user_problem
from abtest.config.yaml_checks import Fields, yaml_mapping
from abtest.config.yaml_input import read_text
from abtest.errors import UserError


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
    #: how the node is reached over SSH (None with ``transport: pod``)
    ssh: SSHTarget | None
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
    #: abtest uploads a build an arm needs and the node lacks into builds_dir (``kubelet.
    #: place_builds``, default true; false: the pre-flight refuses a missing build instead)
    place_builds: bool = True
    #: ``ssh`` (the default) or ``pod``: a privileged pod pinned to the node (``pod``)
    transport: str = "ssh"
    pod: PodTarget | None = None

    @property
    def reached_by(self) -> str:
        """How the node is reached, as the report's Method says it."""
        if self.pod is not None:
            return f"a pod ({self.pod.image} in namespace {self.pod.namespace})"
        return f"SSH ({self.ssh.host})" if self.ssh else "SSH"

    def build_binary(self, build: BuildName, where: str | None = None) -> str:
        """Where a placed build (``v1.35.4``, ``v1.36.3+agc``) is found on the node,
        ``<builds_dir>/<build>/kubelet`` (:func:`abtest.config.build_names.build_folder`, the
        rule the lab places builds by too). UserError (naming ``where``, else this profile's
        file) when the profile has no builds_dir."""
        if self.kubelet_builds_dir is None:
            raise UserError(
                f"kubelet build {build} names a placed build, and profile {self.name} has no "
                "kubelet.builds_dir to find it in",
                where or self.source,
                "set kubelet.builds_dir in the profile (a build is <builds_dir>/BUILD/kubelet),"
                " or name the binary's absolute path on the node",
            )
        return build_binary(self.kubelet_builds_dir, build)


_CRICTL = "crictl --timeout 20s"  # within the 30 s abtest gives each node command


def load_profile(name_or_path: str, base: Path | None = None) -> NodeProfile:
    """A node profile under the one rule of every command (:func:`datafiles.resolve_profile`):
    an argument naming an existing file is that file, otherwise a shipped name."""
    return parse_profile(datafiles.resolve_profile(name_or_path, base))


def parse_profile(path: Path) -> NodeProfile:
    text = read_text(path, "node profile")  # once: what is checked is what is stored
    sections = _profile_sections(text, path)
    transport = transport_of(sections.top)
    check_sections(sections.top, transport)
    pod = (
        pod_target(sections.top.sub("pod", required=True), _health_timeout(sections.top))
        if transport == "pod"
        else None
    )
    port = _checked_ssh_port(sections.ssh)
    _check_ssh_names(sections.ssh)
    lock_path = _checked_lock_path(sections.top)
    node_name = _checked_node_name(sections.top)
    _check_removers(sections.commands)
    _check_sandbox_listing(sections.commands)
    _check_handler_listing(sections.commands)
    _check_sandbox_stop(sections.commands)
    _check_kubelet_paths(sections.kubelet)
    _check_node_commands(sections.kubelet, sections.commands)
    profile = _profile_from(path, text, sections, port, node_name, lock_path)
    if pod is None:
        return profile
    if pod.deadman_s <= profile.health_timeout_s:
        raise sections.top.error(
            "pod.deadman_s",
            f"{pod.deadman_s:g} s is not longer than health_timeout_s "
            f"({profile.health_timeout_s:g} s): the timer would put the node back while abtest "
            "still waits for the restarted kubelet",
            "give pod.deadman_s more than health_timeout_s (by default 60 s more)",
        )
    return dataclasses.replace(profile, ssh=None, transport="pod", pod=pod)


class _Sections(NamedTuple):
    """A profile's mapping and its ``ssh``, ``kubelet`` and ``commands`` sub-mappings."""

    top: Fields
    ssh: Fields
    kubelet: Fields
    commands: Fields


def _profile_sections(text: str, path: Path) -> _Sections:
    """The profile's sections, each holding only the keys it allows (no ssh password)."""
    top = Fields(yaml_mapping(text, path), path)
    top.only(
        {
            "profile",
            "description",
            "node_name",
            "kubeconfig",
            "context",
            "ssh",
            "transport",
            "pod",
            "sudo",
            "kubelet",
            "commands",
            "lock_path",
            "health_timeout_s",
        }
    )
    ssh = top.sub("ssh")
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
            "place_builds",
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
    return _Sections(top, ssh, kubelet, commands)


def _checked_ssh_port(ssh: Fields) -> int | None:
    port = ssh.data.get("port")
    if port is not None and (problem := port_problem(port)):
        raise ssh.error("port", problem, "a TCP port, 1-65535 (or leave it out for 22)")
    return port


def _check_ssh_names(ssh: Fields) -> None:
    for key, check in (("host", host_problem), ("user", user_problem)):
        if key in ssh.data and (problem := check(ssh.data[key])):
            raise ssh.error(key, problem, "give the name as `ssh` takes it")


def _checked_lock_path(top: Fields) -> str:
    lock_path = top.text("lock_path", default="/var/lib/abtest/node.lock")
    if problem := node_path_problem(lock_path):
        raise top.error("lock_path", problem, NODE_PATH_TODO)
    return lock_path


def _checked_node_name(top: Fields) -> str:
    node_name = top.text("node_name", required=True)
    if problem := node_name_problem(node_name):
        raise top.error("node_name", problem, NODE_NAME_TODO)
    return node_name


def _check_kubelet_paths(kubelet: Fields) -> None:
    for key in ("config_path", "binary_path", "builds_dir"):
        value = kubelet.text(key, required=key != "builds_dir", default="/")
        if problem := node_path_problem(value):
            raise kubelet.error(key, problem, NODE_PATH_TODO)


def _check_node_commands(kubelet: Fields, commands: Fields) -> None:
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


def _profile_from(
    path: Path, text: str, sections: _Sections, port: int | None, node_name: str, lock_path: str
) -> NodeProfile:
    """The profile of checked sections. The fields not checked before (ssh.host, the flags,
    health_timeout_s, kubelet.build) are read here in this order: the first bad one is raised."""
    top, ssh, kubelet, commands = sections
    return NodeProfile(
        name=top.text("profile", default=path.stem),
        source=str(path),
        node_name=node_name,
        kubeconfig=_expand(top.opt_text("kubeconfig")),
        kube_context=top.opt_text("context"),
        ssh=_ssh_target(ssh, port) if "ssh" in top.data else None,
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
        health_timeout_s=_health_timeout(top),
        text=text,
        status_command=kubelet.opt_text("status_command"),
        pid_command=kubelet.opt_text("pid_command"),
        kubelet_builds_dir=kubelet.opt_text("builds_dir"),
        kubelet_build=_build(kubelet),
        place_builds=kubelet.flag("place_builds", default=True),
        stopped_sandboxes_command=commands.opt_text("stopped_sandboxes"),
        sandbox_remove_command=commands.opt_text("sandbox_remove"),
        runtime_handlers_command=commands.opt_text("runtime_handlers"),
        sandbox_handlers_command=commands.opt_text("sandbox_handlers"),
        container_starts_command=commands.opt_text("container_starts"),
        round_sandboxes_command=commands.opt_text("round_sandboxes"),
        sandbox_stop_command=commands.opt_text("sandbox_stop"),
    )


def _ssh_target(ssh: Fields, port: int | None) -> SSHTarget:
    return SSHTarget(
        host=ssh.text("host", required=True),
        port=port,
        user=ssh.opt_text("user"),
        key_file=_expand(ssh.opt_text("key")),
        use_agent=ssh.flag("agent", default=True),
        known_hosts=_expand(ssh.opt_text("known_hosts")),
        config_file=_expand(ssh.opt_text("config")),
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


def _health_timeout(top: Fields) -> float:
    return top.number("health_timeout_s", default=120.0, rng=num.HEALTH_TIMEOUT_S)


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
