"""The lab's container runtimes: runc (the default) and crun, as containerd runtime
handlers on every node and as RuntimeClass objects in the cluster.

crun implements runc's command line, so containerd drives both through the same shim
(io.containerd.runc.v2) and only the binary differs. A pod picks one with
`spec.runtimeClassName`; a pod without one gets containerd's default, runc, as before."""

from __future__ import annotations

import json
import subprocess
import urllib.error
from dataclasses import dataclass
from typing import Any

from abtest.errors import LabError
from abtest.lab import components
from abtest.lab.layout import Node, Paths, Say

RUNTIME_CLASS_PATH = "/apis/node.k8s.io/v1/runtimeclasses"
MANAGED_BY = "abtest-lab"
CRICTL_TIMEOUT = "10s"


@dataclass(frozen=True)
class Handler:
    """A containerd runtime handler; `binary` is the OCI runtime it runs (from a Debian
    package in host.PACKAGES). runc's entry names no BinaryName: containerd finds `runc`
    on its PATH, as it did before crun was added, so the baseline is unchanged."""

    name: str
    binary: str
    binary_name_option: bool


HANDLERS = (
    Handler("runc", "/usr/sbin/runc", binary_name_option=False),
    Handler("crun", "/usr/bin/crun", binary_name_option=True),
)
DEFAULT_HANDLER = "runc"
# RuntimeClass name -> handler, created at `lab up`.
RUNTIME_CLASSES = {h.name: h.name for h in HANDLERS}


def containerd_runtimes_toml(cri: str) -> str:
    """The `[...containerd]` section of a node's containerd config: every handler, runc the
    default. cgroupfs for all (the lab runs cgroup v1 with the kubelet's cgroupfs driver)."""
    out = [f"  [{cri}.containerd]", f'    default_runtime_name = "{DEFAULT_HANDLER}"']
    for h in HANDLERS:
        table = f"{cri}.containerd.runtimes.{h.name}"
        out += [
            f"    [{table}]",
            '      runtime_type = "io.containerd.runc.v2"',
            f"      [{table}.options]",
        ]
        if h.binary_name_option:
            out.append(f'        BinaryName = "{h.binary}"')
        out.append("        SystemdCgroup = false")
    return "\n".join(out) + "\n"


# --- RuntimeClass objects ------------------------------------------------------------------


def runtime_classes(paths: Paths, ports: dict[str, int]) -> dict[str, str]:
    """Every RuntimeClass in the cluster: name -> handler."""
    listed = components.api_get(paths, ports, RUNTIME_CLASS_PATH)
    return {
        item["metadata"]["name"]: item.get("handler", "")
        for item in sorted(listed.get("items", []), key=lambda i: i["metadata"]["name"])
    }


def ensure_runtime_classes(paths: Paths, ports: dict[str, int], say: Say) -> None:
    """Create the lab's RuntimeClass objects; idempotent. One with the same name but
    another handler is deleted and created again (the handler field is immutable).
    RuntimeClasses that are not the lab's are left alone."""
    have = runtime_classes(paths, ports)
    for name, handler in RUNTIME_CLASSES.items():
        if have.get(name) == handler:
            continue
        if name in have:
            components.api_call(paths, ports, f"{RUNTIME_CLASS_PATH}/{name}", "DELETE")
            say(f"  RuntimeClass {name}: handler {have[name]} -> {handler}")
        body = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
            "handler": handler,
        }
        try:
            components.api_call(paths, ports, RUNTIME_CLASS_PATH, "POST", body)
        except urllib.error.HTTPError as exc:
            raise LabError(
                f"RuntimeClass {name} (handler {handler}): create failed: HTTP {exc.code} "
                f"{exc.reason}"
            ) from exc
    say("  runtime classes: " + ", ".join(f"{n} (handler {h})" for n, h in RUNTIME_CLASSES.items()))


# --- what containerd reports ---------------------------------------------------------------


def handlers_from_info(info: dict[str, Any]) -> tuple[str, ...]:
    """The runtime handlers in `crictl info` output, sorted. A runtime that fills CRI's
    StatusResponse.runtime_handlers (containerd 2.x) lists them under `runtimeHandlers`
    (the nameless entry is the default handler again); containerd 1.6 and 1.7 do not, and their
    CRI configs list them under config.containerd.runtimes."""
    listed = info.get("runtimeHandlers")
    if isinstance(listed, list):
        names = {str(h.get("name", "")) for h in listed if isinstance(h, dict)}
    else:
        runtimes = info.get("config", {}).get("containerd", {}).get("runtimes")
        names = set(runtimes) if isinstance(runtimes, dict) else set()
    names.discard("")
    if not names:
        raise LabError("crictl info lists no runtime handlers (neither runtimeHandlers nor config)")
    return tuple(sorted(names))


def crictl_base(node: Node) -> list[str]:
    return [
        str(node.paths.bin / "crictl"),
        "--runtime-endpoint",
        f"unix://{node.containerd_socket}",
        "--timeout",
        CRICTL_TIMEOUT,
    ]


def runtime_version_from(text: str) -> str | None:
    """The runtime's own version in `crictl version` output (the CRI Version call's
    RuntimeVersion: v1.7.28 for the lab's containerd, 1.6.20~ds1 for Debian's)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "RuntimeVersion" and value.strip():
            return value.strip()
    return None


def node_runtime_version(node: Node) -> tuple[str | None, str | None]:
    """(the version the node's running containerd reports, None) or (None, why not)."""
    try:
        proc = subprocess.run(
            [*crictl_base(node), "version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"crictl version: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return None, f"crictl version exited {proc.returncode}: {' '.join(tail)}"
    found = runtime_version_from(proc.stdout)
    return (found, None) if found else (None, "crictl version named no RuntimeVersion")


def node_handlers(node: Node) -> tuple[tuple[str, ...], str | None]:
    """(handlers as the node's containerd reports them, None) or ((), why not)."""
    try:
        proc = subprocess.run(
            [*crictl_base(node), "info"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"crictl info: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return (), f"crictl info exited {proc.returncode}: {' '.join(tail)}"
    try:
        return handlers_from_info(json.loads(proc.stdout)), None
    except (ValueError, LabError) as exc:
        return (), f"crictl info: {exc}"
