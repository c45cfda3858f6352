"""Fakes of abtest's node, host and API-server parts, for tests (in the spirit of
``fabric.testing``). Each implements the protocol the real part does, so code under test is
handed one instead of having module globals patched:

- :class:`FakeKit` (:class:`~abtest.engine.sweep_nodes.NodeKit`) over scripted :class:`FakeNode` s,
  with :class:`FakeController`, :class:`FakeSession`, :func:`fake_round` and
  :func:`fake_profiles`: a whole sweep without a cluster (:mod:`abtest.testing.node`);
- :class:`FakeHost`: one node's files on this machine under the real
  :class:`~abtest.node.control.NodeController`, over a :class:`FakeConnection`
  (:class:`abtest.node.connection.Connection`) and a :class:`FakeCluster` (the API server's view
  of the node), and :class:`HostKit`, a FakeKit whose controller is the real one on a FakeHost
  (:mod:`abtest.testing.host`);
- :class:`FakePods` (:class:`~abtest.batch.round_pods.RoundPods`): a batch round's creates,
  watch and delete without an API server (:mod:`abtest.testing.pods`).

``node.expect(...)`` / ``host.expect(...)`` script commands that must run, in order;
``verify()`` asserts they did and the node is left as found. Nothing in abtest itself imports
this package.
"""

from abtest.testing.host import FakeCluster, FakeConnection, FakeHost, HostKit
from abtest.testing.node import (
    FakeController,
    FakeKit,
    FakeKitCluster,
    FakeNode,
    FakeSession,
    fake_profiles,
    fake_round,
)
from abtest.testing.pods import FakePods, FakeWatch

__all__ = [
    "FakeCluster",
    "FakeConnection",
    "FakeController",
    "FakeHost",
    "FakeKit",
    "FakeKitCluster",
    "FakeNode",
    "FakePods",
    "FakeSession",
    "FakeWatch",
    "HostKit",
    "fake_profiles",
    "fake_round",
]
