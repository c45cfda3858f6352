"""What a round asks the API server about its pods, as one object: :class:`RoundPods`.

:func:`abtest.batch.round.run_round` and :func:`~abtest.batch.round.cleanup` take one (the
real :class:`ClusterPods`, over :mod:`abtest.cluster`, when none is given), so a test hands a
round :class:`abtest.testing.FakePods` instead of patching module globals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypedDict, Unpack

from abtest.batch.generator import SubmitResult, submit
from abtest.batch.template import RenderedPod
from abtest.cluster.client import Cluster
from abtest.cluster.namespaces import check_owned
from abtest.cluster.pods import OnEvent, PodWatch, count_pods, delete_pods, wait_pods_gone
from abtest.errors import AbtestError


class RoundWatch(Protocol):
    """A round's pod watch (:class:`abtest.cluster.pods.PodWatch`): open before the first
    create, stopped after the observation; ``error`` set when it gave up."""

    @property
    def error(self) -> AbtestError | None: ...

    @property
    def restarts(self) -> int: ...

    @property
    def relists(self) -> int: ...

    @property
    def last_error(self) -> str | None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class SubmitTerms(TypedDict):
    """How a round's creates are sent (:func:`abtest.batch.generator.submit` says each)."""

    qps: float
    concurrency: int
    deadline: float
    selector: str
    clock: Callable[[], float]


class WatchTerms(TypedDict):
    """How a round's watch runs (:class:`abtest.cluster.pods.PodWatch` says each)."""

    server_timeout_s: int
    clock: Callable[[], float]
    start_resource_version: str | None
    on_failure: Callable[[str], None]


class RoundPods(Protocol):
    """The API-server side of one round's pods: the namespace check, the creates, the watch,
    the delete and the wait for the pods to be gone."""

    def check_owned(self, namespace: str) -> None:
        """Raise unless ``namespace`` exists and is the tool's own."""
        ...

    def submit(
        self, namespace: str, pods: Sequence[RenderedPod], **terms: Unpack[SubmitTerms]
    ) -> SubmitResult:
        """Create the pods at the target rate (:func:`abtest.batch.generator.submit`)."""
        ...

    def watch(
        self, namespace: str, selector: str, on_event: OnEvent, **terms: Unpack[WatchTerms]
    ) -> RoundWatch:
        """A watch (not yet started) telling ``on_event`` about the selected pods."""
        ...

    def delete(self, namespace: str, selector: str) -> None:
        """Delete the selected pods at once (grace 0)."""
        ...

    def count(self, namespace: str, selector: str) -> int:
        """How many of the selected pods the API server still lists."""
        ...

    def wait_gone(self, namespace: str, selector: str, timeout_s: float) -> int:
        """Wait until no selected pod is left (at most ``timeout_s``); how many are left."""
        ...


class ClusterPods:
    """The real :class:`RoundPods`: :mod:`abtest.cluster`'s functions on one cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def check_owned(self, namespace: str) -> None:
        check_owned(self.cluster, namespace)

    def submit(
        self, namespace: str, pods: Sequence[RenderedPod], **terms: Unpack[SubmitTerms]
    ) -> SubmitResult:
        return submit(self.cluster, namespace, pods, **terms)

    def watch(
        self, namespace: str, selector: str, on_event: OnEvent, **terms: Unpack[WatchTerms]
    ) -> PodWatch:
        return PodWatch(self.cluster, namespace, selector, on_event, **terms)

    def delete(self, namespace: str, selector: str) -> None:
        delete_pods(self.cluster, namespace, selector)

    def count(self, namespace: str, selector: str) -> int:
        return count_pods(self.cluster, namespace, selector)

    def wait_gone(self, namespace: str, selector: str, timeout_s: float) -> int:
        return wait_pods_gone(self.cluster, namespace, selector, timeout_s)
