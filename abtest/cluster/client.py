"""Connections to the API server, and the one place API errors become typed errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from abtest.cluster.kubeconfig import KubeSource, load
from abtest.errors import ClusterError

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


# the ignore: kubernetes 36 (the bound apache-otava's dependencies force) ships no types
class TimedApiClient(client.ApiClient):  # type: ignore[misc, unused-ignore]
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
    #: which context and server, from which files (None when built by hand, e.g. in tests)
    source: KubeSource | None = None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def configuration(self) -> client.Configuration:
        cfg: client.Configuration = self.api_client.configuration
        return cfg


def connect(kubeconfig: str | None, pool_size: int = 32, context: str | None = None) -> Cluster:
    """A client for ``context`` of ``kubeconfig`` (kubectl's defaults when None; see
    abtest.cluster.kubeconfig). Nothing is sent yet: ``probe`` checks it answers."""
    cfg = client.Configuration()
    source = load(cfg, kubeconfig, context)
    cfg.connection_pool_maxsize = pool_size
    cfg.retries = False
    return Cluster(TimedApiClient(cfg), kubeconfig, source)


def probe(cluster: Cluster, timeout: float = 10.0) -> None:
    """One authenticated GET (/api): the server answers and takes these credentials.

    Raises ClusterError naming the context, the server and the kubeconfig files, so a wrong
    context is one clear line rather than a failure deep inside a command."""
    where = cluster.source.describe() if cluster.source else "the API server"
    try:
        client.CoreApi(cluster.api_client).get_api_versions(_request_timeout=timeout)
    except ApiException as exc:
        typed = convert(exc)
        raise type(typed)(f"{where}: {typed}") from exc
    except urllib3.exceptions.HTTPError as exc:
        raise ClusterError(f"{where}: cannot reach the API server ({exc})") from exc


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
