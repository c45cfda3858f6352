"""Fast cleanup (issue 15 part 2) without a node: once a round's pods are gone from the API,
abtest stops that round's own sandboxes (``crictl stopp``) instead of letting every pod wait out
the kubelet's 2 s minimum grace, and removes them only once they are all stopped.

Fake crictl output in, the exact commands that would run on the node out: only sandboxes whose
labels say exactly this namespace, the tool and this round are ever named in a command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crictl_sandboxes import (
    DECOYS,
    REMOVE,
    ROUND,
    ROUND_LIST,
    STOP,
    STOPPED_LIST,
    FakeSSH,
    listing,
    sandbox,
    session,
    sid,
)

from abtest.batch import round as round_mod
from abtest.batch.round_gaps import BEFORE, Laps
from abtest.batch.template import MANAGED_BY, MANAGED_BY_KEY, ROUND_LABEL
from abtest.config.playbook import NodeProfile, load_profile, parse_profile
from abtest.errors import ConfigError, NodeError, UserError
from abtest.node.session import (
    NAMESPACE_LABEL,
    RoundSandboxes,
    select_round_sandboxes,
)
from abtest.testing import FakePods

# --- selection --------------------------------------------------------------------------------


def test_only_this_rounds_labelled_sandboxes_are_selected() -> None:
    out = listing(
        sandbox(1), sandbox(2, state="SANDBOX_NOTREADY"), *DECOYS, sandbox(3, state="UNKNOWN")
    )
    got = select_round_sandboxes(out, "abtest", ROUND, where="w")
    assert got == RoundSandboxes(ready=(sid(1),), stopped=(sid(2),))


def test_metadata_namespace_must_agree_with_the_label() -> None:
    box = sandbox(1)
    box["metadata"]["namespace"] = "other"
    assert select_round_sandboxes(listing(box), "abtest", ROUND, where="w") == RoundSandboxes(
        (), ()
    )


def test_an_id_that_is_not_hex_never_reaches_the_shell() -> None:
    box = sandbox(1)
    box["id"] = "abc; rm -rf /"
    fake = FakeSSH(listing(box))
    with pytest.raises(NodeError, match="unexpected sandbox id"):
        session(fake).clean_round_sandboxes("abtest", ROUND)
    assert len(fake.commands) == 1  # the listing only


def test_a_listing_that_is_not_json_is_a_user_error() -> None:
    with pytest.raises(UserError, match="round-sandbox listing did not print JSON"):
        select_round_sandboxes("POD ID  CREATED", "abtest", ROUND, where="w")


# --- stop, then remove ------------------------------------------------------------------------


def test_running_sandboxes_are_stopped_then_all_of_the_round_removed() -> None:
    fake = FakeSSH(listing(sandbox(1), sandbox(2), sandbox(3, state="SANDBOX_NOTREADY"), *DECOYS))
    assert session(fake).clean_round_sandboxes("abtest", ROUND) == 3
    assert fake.commands[0] == (
        "crictl pods -o json --label io.kubernetes.pod.namespace=abtest "
        f"--label abtest/round={ROUND}"
    )
    # stop before rmp: the two running ones, one command each, at the same time
    assert [c.split()[1] for c in fake.commands] == ["pods", "stopp", "stopp", "rmp"]
    assert sorted(fake.ids_in("stopp")) == [[sid(1)], [sid(2)]]
    assert fake.ids_in("rmp") == [[sid(1), sid(2), sid(3)]]
    decoy_ids = {d["id"] for d in DECOYS}
    assert not decoy_ids & {i for c in fake.commands for i in c.split()}


def test_all_stopped_already_means_no_stop_command() -> None:
    fake = FakeSSH(listing(sandbox(1, state="SANDBOX_NOTREADY")))
    assert session(fake).clean_round_sandboxes("abtest", ROUND) == 1
    assert fake.ids_in("stopp") == [] and fake.ids_in("rmp") == [[sid(1)]]


def test_nothing_of_the_round_left_runs_only_the_listing() -> None:
    fake = FakeSSH(listing(*DECOYS))
    assert session(fake).clean_round_sandboxes("abtest", ROUND) == 0
    assert len(fake.commands) == 1


def test_a_stop_that_raced_the_kubelet_removes_nothing_this_pass() -> None:
    # crictl stopp stops at its first error: the ones after it may still run
    err = 'E1130 rpc error: code = NotFound desc = an error occurred when try to find sandbox "x"'
    fake = FakeSSH(listing(sandbox(1), sandbox(2)), stop=(1, err))
    assert session(fake).clean_round_sandboxes("abtest", ROUND) == 0
    assert fake.ids_in("rmp") == []


def test_a_failing_stop_is_a_node_error_and_nothing_is_removed() -> None:
    fake = FakeSSH(listing(sandbox(1)), stop=(1, "permission denied"))
    with pytest.raises(NodeError, match="stopping 1 pod sandboxes of round"):
        session(fake).clean_round_sandboxes("abtest", ROUND)
    assert fake.ids_in("rmp") == []


def test_a_round_tag_that_is_not_ours_is_refused_before_any_command() -> None:
    fake = FakeSSH(listing())
    with pytest.raises(NodeError, match="invalid round tag"):
        session(fake).clean_round_sandboxes("abtest", "x y;")
    assert fake.commands == []


def test_without_the_stop_commands_the_stopped_ones_are_removed_as_before() -> None:
    fake = FakeSSH(
        listing(sandbox(1, state="SANDBOX_NOTREADY", round_tag="ffffffffff"), sandbox(2))
    )
    assert session(fake, fast=False).clean_round_sandboxes("abtest", ROUND) == 1
    assert fake.commands[0] == STOPPED_LIST.replace("{namespace}", "abtest")
    assert fake.ids_in("stopp") == [] and fake.ids_in("rmp") == [[sid(1)]]


# --- the round binds its own label --------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_the_round_cleans_its_own_sandboxes_by_its_label() -> None:
    prep = round_mod._Prepared(  # what _prepare makes, without an API server
        round_tag=ROUND,
        selector=f"{MANAGED_BY_KEY}={MANAGED_BY},{ROUND_LABEL}={ROUND}",
        pods=[],
        baseline=2,
        before=None,
        notes=[],
        pre=Laps(BEFORE, Clock()),
    )
    counts = iter([7, 2])
    tags: list[str] = []

    def clean_sandboxes(tag: str) -> int:
        tags.append(tag)
        return 5

    res = round_mod._clean_up(
        None,  # type: ignore[arg-type]
        prep,
        namespace="abtest",
        sandbox_count=lambda: next(counts),
        timeout_s=30,
        clock=Clock(),
        reap_sandboxes=lambda: pytest.fail("the namespace-wide removal ran"),
        clean_sandboxes=clean_sandboxes,
        say=lambda _: None,
        api=FakePods(),
    )
    assert res.ok and res.sandbox_count == 2
    assert tags == [ROUND]
    detail = {p.part: p.seconds for p in res.parts if not p.summed}
    assert detail["sandboxes_removed"] == 5


# --- the profile's commands -------------------------------------------------------------------

BASE = """\
profile: p
node_name: n1
ssh: {host: n1, known_hosts: /dev/null}
kubelet: {config_path: /var/lib/kubelet/config.yaml, binary_path: /usr/bin/kubelet}
commands:
"""


def profile_with(tmp_path: Path, commands: dict[str, str]) -> NodeProfile:
    path = tmp_path / "p.yaml"
    body = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in commands.items())
    path.write_text(BASE + body)
    return parse_profile(path)


FULL = {
    "stopped_sandboxes": "crictl pods --state notready -o json",
    "sandbox_remove": REMOVE,
    "round_sandboxes": ROUND_LIST,
    "sandbox_stop": STOP,
}


def test_a_profile_with_the_fast_commands_parses(tmp_path: Path) -> None:
    p = profile_with(tmp_path, FULL)
    assert (p.round_sandboxes_command, p.sandbox_stop_command) == (ROUND_LIST, STOP)


@pytest.mark.parametrize(
    ("change", "key", "what"),
    [
        ({"sandbox_stop": None}, "round_sandboxes", "without `sandbox_stop`"),
        ({"round_sandboxes": None}, "sandbox_stop", "without `round_sandboxes`"),
        ({"sandbox_remove": None}, "sandbox_stop", "without `sandbox_remove`"),
        (
            {"round_sandboxes": "crictl pods -q --label abtest/round={round}"},
            "round_sandboxes",
            "JSON",
        ),
        ({"round_sandboxes": ROUND_LIST + " --state ready"}, "round_sandboxes", "filters by state"),
        ({"sandbox_stop": "crictl stopp"}, "sandbox_stop", "{ids}"),
    ],
)
def test_fast_commands_are_validated(
    tmp_path: Path, change: dict[str, str | None], key: str, what: str
) -> None:
    commands = {k: v for k, v in (FULL | change).items() if v is not None}
    with pytest.raises(ConfigError) as info:
        profile_with(tmp_path, commands)
    assert key in str(info.value) and what in str(info.value)


@pytest.mark.parametrize("name", ["lab", "kubeadm-systemd"])
def test_shipped_profiles_stop_by_exact_labels(name: str) -> None:
    p = load_profile(name)
    words = (p.round_sandboxes_command or "").split()
    assert words[words.index("-o") + 1] == "json" and "--state" not in words
    assert f"{NAMESPACE_LABEL}={{namespace}}" in words
    assert f"{ROUND_LABEL}={{round}}" in words
    assert (p.sandbox_stop_command or "").split()[-2:] == ["stopp", "{ids}"]
