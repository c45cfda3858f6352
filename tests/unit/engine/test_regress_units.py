"""Pure parts of the live regression gate: node-state specs, binary paths, journal kinds."""

from __future__ import annotations

import pytest

from abtest.engine.regress_live import NodeState, parse_spec
from abtest.errors import UserError
from abtest.node.binary import check_path
from abtest.store.db import Store
from abtest.store.journal import Journal


def test_parse_spec() -> None:
    assert parse_spec("default", "--reference") == NodeState(None, ())
    assert parse_spec("", "--reference") == NodeState(None, ())
    state = parse_spec("binary=/opt/kubelet-rc1, featureGates.Foo=true,kubeAPIQPS=5", "--c")
    assert state.binary == "/opt/kubelet-rc1"
    assert dict(state.settings) == {"featureGates.Foo": True, "kubeAPIQPS": 5}


@pytest.mark.parametrize(
    "spec", ["binary=relative/kubelet", "binary=/opt/k;rm -rf /", "featureGates.Foo=maybe", "=3"]
)
def test_bad_specs_are_one_clear_error(spec: str) -> None:
    with pytest.raises(UserError) as err:
        parse_spec(spec, "--candidate")
    assert "--candidate" in err.value.one_line()


def test_binary_paths_are_validated() -> None:
    assert check_path("/usr/bin/kubelet", "x") == "/usr/bin/kubelet"
    for bad in ("/usr/bin/../../etc/passwd", "/a b", "/x$(id)", "usr/bin/kubelet"):
        with pytest.raises(UserError):
            check_path(bad, "x")


def test_journal_pending_is_per_kind(store: Store) -> None:
    journal = Journal(store)
    binary = journal.begin(
        node_name="n",
        profile_name="p",
        path="/usr/bin/kubelet",
        original=b"",
        applied={},
        kind="binary",
    )
    assert journal.pending("n") is None
    assert journal.pending("n", kind="binary") == binary
    config = journal.begin(
        node_name="n", profile_name="p", path="/c.yaml", original=b"x", applied={}
    )
    assert journal.pending("n") == config
