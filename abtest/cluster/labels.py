"""The labels abtest puts on what it creates in the cluster (namespaces, pods), by which it
knows, and only cleans, its own. Here, beneath the batch and node layers, because the batch
labels its pods with them and the node's sandbox cleanup checks them."""

from __future__ import annotations

MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "abtest"
#: a pod's run and round (the round's tag also selects its sandboxes on the node)
RUN_LABEL = "abtest/run"
ROUND_LABEL = "abtest/round"
