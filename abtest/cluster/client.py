"""Connections to the API server, and the one place API errors become typed errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from abtest.errors import ClusterError, UserError

P = ParamSpec("P")
T = TypeVar("T")

#: (connect, read) seconds for a plain API call; call sites pass it explicitly, and
#: TimedApiClient applies it to any call that does not (so nothing can hang for ever)
REQUEST_TIMEOUT = (10.0, 30.0)


class NotFound(ClusterError):
    """The object does not exist."""


class Conflict(ClusterError):
    """The object exists already, or changed under us."""


class Forbidden(ClusterError):
    """The credentials may not do this."""


class TooManyRequests(ClusterError):
    """429 / 5xx: the API server asks us to back off."""


class TimedApiClient(client.ApiClient):
    """An ApiClient whose every request has a timeout: the kubernetes client's default is
    none at all, so one call forgotten without ``_request_timeout`` could block for ever on
    a stuck API server or a half-open connection."""

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = REQUEST_TIMEOUT
        return super().call_api(*args, **kwargs)


@dataclass
class Cluster:
    """An API client built from a kubeconfig; cheap to pass around, one per controller."""

    api_client: client.ApiClient
    kubeconfig: str | None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def configuration(self) -> client.Configuration:
        cfg: client.Configuration = self.api_client.configuration
        return cfg


def connect(kubeconfig: str | None, pool_size: int = 32) -> Cluster:
    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    except (ConfigException, FileNotFoundError, OSError) as exc:
        raise UserError(
            f"cannot load kubeconfig: {exc}",
            kubeconfig or "~/.kube/config",
            "set kubeconfig in the node profile or KUBECONFIG",
        ) from None
    cfg.connection_pool_maxsize = pool_size
    cfg.retries = False
    return Cluster(TimedApiClient(cfg), kubeconfig)


def convert(exc: ApiException) -> ClusterError:
    status = exc.status or 0
    reason = f"API server answered {status} {exc.reason}"
    body = getattr(exc, "body", None)
    if body:
        reason += f": {str(body)[:300]}"
    if status == 404:
        return NotFound(reason)
    if status == 409:
        return Conflict(reason)
    if status in (401, 403):
        return Forbidden(reason)
    if status == 429 or status >= 500:
        return TooManyRequests(reason)
    return ClusterError(reason)


def api_call(fn: Callable[P, T]) -> Callable[P, T]:
    """Decorator: every ApiException or transport error leaves the cluster layer typed."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise convert(exc) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"cannot reach the API server: {exc}") from exc

    return wrapper


def node_proxy_get(cluster: Cluster, node: str, path: str, timeout: float = 10.0) -> str:
    """GET a kubelet path (configz, metrics, healthz) through the API server's node proxy."""
    try:
        resp: Any = cluster.core.connect_get_node_proxy_with_path(
            node, path, _preload_content=False, _request_timeout=timeout
        )
    except ApiException as exc:
        raise convert(exc) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise ClusterError(f"cannot reach the API server: {exc}") from exc
    return str(resp.data.decode("utf-8", errors="replace"))
