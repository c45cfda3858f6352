"""Stopped-sandbox cleanup (issue 11 item 2) without a node: fake crictl output in, the exact
commands that would run on the node out.

The old listing (``crictl pods -q --namespace abtest``) is an unanchored regular expression
and its ids were removed unchecked; now every sandbox's labels are checked in Python.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crictl_sandboxes import STOPPED_LIST, FakeSSH, listing, session, stopped_sandbox

from abtest.batch import round as round_mod
from abtest.batch.template import MANAGED_BY, MANAGED_BY_KEY
from abtest.config.playbook import load_profile, parse_profile
from abtest.errors import ConfigError, NodeError, UserError
from abtest.node.session import NAMESPACE_LABEL, select_stopped_sandboxes
from abtest.testing import FakePods


def test_decoys_in_look_alike_namespaces_are_never_removed() -> None:
    # what `crictl pods --namespace abtest` returns: every namespace containing "abtest"
    fake = FakeSSH(
        listing(
            stopped_sandbox(1, "abtest-ci"),
            stopped_sandbox(2, "team-abtest-prod"),
            stopped_sandbox(3, "abtest", tool_label=False),
            stopped_sandbox(4, "abtest", state="SANDBOX_READY"),
        )
    )
    assert session(fake).remove_stopped_sandboxes("abtest") == 0
    assert fake.removals == []


def test_only_the_checked_sandbox_is_removed_and_its_id_quoted() -> None:
    ours = stopped_sandbox(7, "abtest")
    fake = FakeSSH(
        listing(stopped_sandbox(1, "abtest-ci"), ours, stopped_sandbox(2, "team-abtest-prod"))
    )
    assert session(fake).remove_stopped_sandboxes("abtest") == 1
    assert fake.removals == [f"crictl rmp {ours['id']}"]
    # the exact namespace goes into the (pre-filtering) listing, quoted
    assert fake.commands[0] == STOPPED_LIST.replace("{namespace}", "abtest")


def test_tool_label_must_have_the_tools_value() -> None:
    other = stopped_sandbox(5, "abtest")
    other["labels"][MANAGED_BY_KEY] = "helm"
    fake = FakeSSH(listing(other))
    assert session(fake).remove_stopped_sandboxes("abtest") == 0
    assert fake.removals == []


def test_pure_selection_matches_exactly() -> None:
    out = listing(
        stopped_sandbox(1, "abtest"), stopped_sandbox(2, "abtest-ci"), stopped_sandbox(3, "xabtest")
    )
    assert select_stopped_sandboxes(out, "abtest", where="w") == ["01" * 32]
    assert select_stopped_sandboxes(out, "abtest-ci", where="w") == ["02" * 32]
    assert select_stopped_sandboxes("", "abtest", where="w") == []
    with pytest.raises(UserError, match="without an `items` list"):
        select_stopped_sandboxes('{"items": null}', "abtest", where="w")


def test_a_bad_id_of_ours_stops_before_anything_is_removed() -> None:
    bad = stopped_sandbox(1, "abtest")
    bad["id"] = "abc; rm -rf /"
    fake = FakeSSH(listing(stopped_sandbox(2, "abtest"), bad))
    with pytest.raises(NodeError, match="unexpected sandbox id"):
        session(fake).remove_stopped_sandboxes("abtest")
    assert fake.removals == []


def test_old_quiet_listing_output_is_a_clear_user_error() -> None:
    fake = FakeSSH(f"{'ab' * 32}\n{'cd' * 32}\n")
    with pytest.raises(UserError, match="did not print JSON") as info:
        session(fake, "crictl pods --state notready").remove_stopped_sandboxes("abtest")
    assert "-o json" in str(info.value) and "commands.stopped_sandboxes" in str(info.value)
    assert fake.removals == []


def test_failing_rmp_is_an_error_not_ignored() -> None:
    fake = FakeSSH(listing(stopped_sandbox(1, "abtest")), rmp=(1, "rpc error: code = Unknown"))
    with pytest.raises(NodeError, match=r"removing 1 stopped pod sandboxes.*exit 1.*rpc error"):
        session(fake).remove_stopped_sandboxes("abtest")


def test_profile_with_the_old_quiet_form_is_refused(tmp_path: Path) -> None:
    text = load_profile("kubeadm-systemd").text
    start = text.index("  stopped_sandboxes:")
    end = text.index("  sandbox_remove:")
    old = text[:start] + (
        "  stopped_sandboxes: crictl pods -q --state notready --namespace {namespace}\n"
    )
    path = tmp_path / "old.yaml"
    path.write_text(old + text[end:], encoding="utf-8")
    with pytest.raises(ConfigError, match=r"commands.stopped_sandboxes.*-o json"):
        parse_profile(path)


@pytest.mark.parametrize("name", ["lab", "kubeadm-systemd"])
def test_shipped_profiles_list_json_filtered_by_exact_labels(name: str) -> None:
    cmd = load_profile(name).stopped_sandboxes_command or ""
    words = cmd.split()
    assert "-o" in words and words[words.index("-o") + 1] == "json"
    assert "-q" not in words and "--namespace" not in words
    assert f"{NAMESPACE_LABEL}={{namespace}}" in words
    assert f"{MANAGED_BY_KEY}={MANAGED_BY}" in words


# --- the cleanup poll -------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds + 0.01  # every poll costs a little


@pytest.fixture()
def no_api() -> FakePods:
    """The API side of a cleanup whose pods are gone at once."""
    return FakePods()


def test_failing_rmp_backs_off_and_is_reported(no_api: FakePods) -> None:
    clock = Clock()
    calls = []

    def reap() -> int:
        calls.append(clock.now)
        raise NodeError("removing 3 stopped pod sandboxes failed (exit 1): boom")

    res = round_mod.cleanup(
        None,  # type: ignore[arg-type]
        "abtest",
        "sel",
        sandbox_count=lambda: 5,
        sandbox_baseline=2,
        timeout_s=30,
        clock=clock,
        reap_sandboxes=reap,
        sleep=clock.sleep,
        pods=no_api,
    )
    assert not res.ok
    assert res.note is not None and "boom" in res.note and "failed" in res.note
    assert res.reap_failures == len(calls) and res.reap_error and "boom" in res.reap_error
    # no spinning: a pause after every failure, growing, capped, never past the deadline
    assert len(clock.sleeps) == len(calls)
    assert clock.sleeps[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(clock.sleeps) <= round_mod.BACKOFF_MAX_S
    assert len(calls) < 15


def test_a_failure_then_success_still_reports_the_failure(no_api: FakePods) -> None:
    clock = Clock()
    counts = iter([5, 5, 2])
    outcomes: list[int | Exception] = [NodeError("rmp failed: transient"), 3]

    def reap() -> int:
        out = outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    res = round_mod.cleanup(
        None,  # type: ignore[arg-type]
        "abtest",
        "sel",
        sandbox_count=lambda: next(counts),
        sandbox_baseline=2,
        timeout_s=30,
        clock=clock,
        reap_sandboxes=reap,
        sleep=clock.sleep,
        pods=no_api,
    )
    assert res.ok and res.note is None and res.sandbox_count == 2
    note = res.reap_note()
    assert note is not None and "1x" in note and "transient" in note
    assert clock.sleeps == [round_mod.BACKOFF_FIRST_S, round_mod.POLL_AFTER_REMOVAL_S]


def test_nothing_to_remove_polls_at_the_idle_pace(no_api: FakePods) -> None:
    clock = Clock()
    counts = iter([4, 3, 2])
    res = round_mod.cleanup(
        None,  # type: ignore[arg-type]
        "abtest",
        "sel",
        sandbox_count=lambda: next(counts),
        sandbox_baseline=2,
        timeout_s=30,
        clock=clock,
        reap_sandboxes=lambda: 0,
        sleep=clock.sleep,
        pods=no_api,
    )
    assert res.ok and res.reap_failures == 0 and res.reap_note() is None
    assert clock.sleeps == [round_mod.POLL_IDLE_S, round_mod.POLL_IDLE_S]
