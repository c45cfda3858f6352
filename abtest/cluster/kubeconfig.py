"""Which cluster and credentials: kubectl's rules, so a user's kubeconfigs work unchanged.

Order: an explicit kubeconfig (``--kubeconfig`` or the profile's ``kubeconfig:``), else
``KUBECONFIG`` (several paths joined by ``:``, merged as kubectl merges them), else
``~/.kube/config``, else the pod's service account when running inside a cluster. The context
is ``--context``, else the profile's ``context:``, else the kubeconfig's current-context.

The kubernetes client merges several files itself, but lets the *last* file's current-context
win and reads ``KUBECONFIG`` once at import; kubectl takes the *first* file that sets it, and
the environment as it is now. Those two points are done here; everything else is the client's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from abtest.config.yaml_input import load_yaml_file
from abtest.errors import ConfigError, UserError

SEPARATOR = os.pathsep
DEFAULT_PATH = "~/.kube/config"
TODO = "give --kubeconfig/--context, or kubeconfig:/context: in the node profile, or KUBECONFIG"


@dataclass(frozen=True)
class KubeSource:
    """Where the connection came from, to name it in errors."""

    context: str | None
    server: str
    files: tuple[str, ...]

    def describe(self) -> str:
        where = ":".join(self.files) if self.files else "in-cluster service account"
        ctx = f"context {self.context!r}" if self.context else "no context"
        return f"{ctx} ({self.server}) from {where}"


def kubeconfig_paths(explicit: str | None) -> tuple[str, ...]:
    """The kubeconfig files to merge, first wins, as kubectl lists them (existing ones only)."""
    if explicit:
        listed = explicit.split(SEPARATOR)
    elif os.environ.get("KUBECONFIG"):
        listed = os.environ["KUBECONFIG"].split(SEPARATOR)
    else:
        listed = [DEFAULT_PATH]
    return tuple(str(Path(p).expanduser()) for p in listed if p and Path(p).expanduser().exists())


def in_cluster() -> bool:
    """Running in a pod with a service account (a CI job on the cluster)."""
    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        and Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
    )


def first_current_context(paths: tuple[str, ...]) -> str | None:
    """kubectl's rule: the first file that sets current-context decides it."""
    for path in paths:
        data = read_kubeconfig(path)
        if isinstance(data, dict) and data.get("current-context"):
            return str(data["current-context"])
    return None


def load(cfg: client.Configuration, kubeconfig: str | None, context: str | None) -> KubeSource:
    """Fill ``cfg`` from the kubeconfig(s) or the service account; UserError when it cannot."""
    paths = kubeconfig_paths(kubeconfig)
    if not paths:
        asked = kubeconfig or os.environ.get("KUBECONFIG")
        if asked is None and in_cluster():
            if context:
                raise UserError(
                    f"--context {context!r} given, but there is no kubeconfig, only the pod's "
                    "service account",
                    "in-cluster config",
                    "drop --context, or give --kubeconfig",
                )
            try:
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call, unused-ignore]
            except ConfigException as exc:
                raise UserError(f"in-cluster config: {exc}", "service account", TODO) from None
            return KubeSource(None, str(cfg.host), ())
        raise UserError("no kubeconfig file found", asked or DEFAULT_PATH, TODO)
    for path in paths:
        read_kubeconfig(path)  # a malformed file is one line naming it, before the client
    chosen = context or first_current_context(paths)
    if not chosen:
        raise UserError("no context chosen and no current-context", ":".join(paths), TODO)
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call, unused-ignore]
            config_file=SEPARATOR.join(paths),
            context=chosen,
            client_configuration=cfg,
            persist_config=False,
        )
    except (ConfigException, OSError, KeyError, TypeError, ValueError) as exc:
        contexts = _context_names(paths)
        hint = f"contexts there: {', '.join(contexts)}" if contexts else TODO
        raise UserError(
            f"cannot use context {chosen!r}: {redact(str(exc))}", ":".join(paths), hint
        ) from None
    return KubeSource(chosen, str(cfg.host), paths)


def _context_names(paths: tuple[str, ...]) -> list[str]:
    names: list[str] = []
    for path in paths:
        try:
            data = read_kubeconfig(path)
        except UserError:
            continue  # already reported by the loader's own error
        if not isinstance(data, dict):
            continue
        for entry in data.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") and entry["name"] not in names:
                names.append(str(entry["name"]))
    return names


def read_kubeconfig(path: str) -> Any:
    """One kubeconfig through the strict loader: its errors name the file and line only, never
    the line's text (a kubeconfig line may be a bearer token or a private key)."""
    try:
        data = load_yaml_file(Path(path), "kubeconfig")
    except ConfigError as exc:
        raise UserError(f"kubeconfig: {exc.what}", exc.where, TODO) from None
    if data is not None and not isinstance(data, dict):
        raise UserError("kubeconfig: expected a mapping at the top level", path, TODO)
    return data


# a credential's value in a message: long base64/hex/JWT-like words, and anything after a
# credential key (token, password, *-data)
_SECRET_WORD = re.compile(r"[A-Za-z0-9+/=_.-]{24,}")
_SECRET_KEY = re.compile(
    r"((?:token|password|secret|client-key-data|client-certificate-data|"
    r"certificate-authority-data|auth-provider|id-token|refresh-token)\S*\s*[:=]\s*)\S+",
    re.IGNORECASE,
)


def redact(message: str) -> str:
    """The kubernetes client's own error text, without any credential it may quote."""
    text = _SECRET_KEY.sub(r"\1<redacted>", message)
    text = _SECRET_WORD.sub("<redacted>", text)
    return text if len(text) <= 300 else text[:297] + "..."
