"""Placing kubelet builds on a node (abtest.node.build_placement, abtest.engine.build_placing):
the real remote scripts run on this machine through abtest.testing's FakeConnection, in a
temp dir standing for the node's builds_dir."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from abtest.config.build_names import BuildName, parse_build_name
from abtest.config.domain import Arm
from abtest.config.playbook import NodeProfile
from abtest.engine import build_placing
from abtest.errors import NodeError, UserError
from abtest.lab.local_builds import LocalBuild
from abtest.node.build_placement import (
    PLACED_FILE,
    UPLOAD_FILE,
    LocalFile,
    list_builds,
    place_build,
    remove_build,
)
from abtest.node.connection import DEFAULT_TIMEOUT_S, Result
from abtest.node.kubelet_build import arm_problems
from abtest.node.session import NodeSession
from abtest.testing import FakeConnection, FakeHost

BUILD = parse_build_name("v1.35.4", "test")
Node = tuple[FakeHost, NodeProfile]


def kubelet(version: str = "v1.35.4", pad: int = 300_000) -> bytes:
    """A "kubelet" that says its version; padded so a small chunk size takes several chunks."""
    return f"#!/bin/sh\necho 'Kubernetes {version}'\nexit 0\n#".encode() + b"x" * pad + b"\n"


class Counting(FakeConnection):
    """The fake host's connection, counting upload commands; ``corrupt``: flip a byte of each
    upload chunk; ``die_after``: raise (a controller killed) after that many chunks."""

    def __init__(self, host: FakeHost, corrupt: bool = False, die_after: int | None = None) -> None:
        super().__init__(host)
        self.uploads = 0
        self.corrupt, self.die_after = corrupt, die_after

    def run(
        self,
        argv: list[str],
        *,
        sudo: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
        stdin: bytes | None = None,
    ) -> Result:
        if len(argv) > 2 and "cat >" in argv[2] and "abtest-upload" in argv[-1]:
            if self.die_after is not None and self.uploads >= self.die_after:
                raise KeyboardInterrupt  # the controller dies between two chunks
            self.uploads += 1
            if self.corrupt and stdin:
                stdin = bytes([stdin[0] ^ 1]) + stdin[1:]
        return super().run(argv, sudo=sudo, timeout=timeout, stdin=stdin)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    host = FakeHost(tmp_path / "node")
    profile = dataclasses.replace(host.profile(), kubelet_builds_dir=str(tmp_path / "builds"))
    return host, profile


def local(tmp_path: Path, data: bytes) -> LocalFile:
    path = tmp_path / "local-kubelet"
    path.write_bytes(data)
    path.chmod(0o755)
    return LocalFile(path, hashlib.sha256(data).hexdigest())


def session(
    host: FakeHost, profile: NodeProfile, conn: FakeConnection | None = None
) -> NodeSession:
    return NodeSession(profile, connection=conn or FakeConnection(host))


def folder(profile: NodeProfile) -> Path:
    assert profile.kubelet_builds_dir
    return Path(profile.kubelet_builds_dir) / "v1.35.4"


def test_upload_renames_verifies_and_records(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, profile = node
    monkeypatch.setenv("ABTEST_UPLOAD_CHUNK_KIB", "64")
    data = kubelet()
    conn = Counting(host)
    said: list[str] = []
    assert place_build(session(host, profile, conn), BUILD, local(tmp_path, data), said.append)
    binary = folder(profile) / "kubelet"
    assert binary.read_bytes() == data
    assert binary.stat().st_mode & 0o777 == 0o755
    assert conn.uploads == 5  # 300 KB in 64 KiB chunks
    assert not (folder(profile) / UPLOAD_FILE).exists()
    record = json.loads((folder(profile) / PLACED_FILE).read_text())
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["build"] == "v1.35.4"
    assert "checked" in said[-1]
    [listed] = list_builds(session(host, profile))
    assert (listed.name, listed.placed_by_abtest, listed.partial_upload) == ("v1.35.4", True, False)
    assert listed.version == "Kubernetes v1.35.4"
    assert listed.size == len(data)


def test_a_build_already_there_is_not_uploaded_again(node: Node, tmp_path: Path) -> None:
    host, profile = node
    data = kubelet()
    assert place_build(session(host, profile), BUILD, local(tmp_path, data), lambda _: None)
    conn = Counting(host)
    assert not place_build(session(host, profile, conn), BUILD, local(tmp_path, data), print)
    assert conn.uploads == 0


def test_a_corrupted_upload_is_refused_and_never_becomes_the_build(
    node: Node, tmp_path: Path
) -> None:
    host, profile = node
    with pytest.raises(NodeError, match="not the local build's"):
        place_build(
            session(host, profile, Counting(host, corrupt=True)),
            BUILD,
            local(tmp_path, kubelet()),
            lambda _: None,
        )
    assert sorted(os.listdir(folder(profile))) == []  # no binary, record or temp file


def test_a_kill_mid_upload_leaves_a_temp_file_never_taken_then_replaced(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, profile = node
    monkeypatch.setenv("ABTEST_UPLOAD_CHUNK_KIB", "64")
    data = kubelet()
    with pytest.raises(KeyboardInterrupt):
        place_build(
            session(host, profile, Counting(host, die_after=2)),
            BUILD,
            local(tmp_path, data),
            lambda _: None,
        )
    partial = folder(profile) / UPLOAD_FILE
    assert partial.stat().st_size == 2 * 65536  # two chunks landed
    assert not (folder(profile) / "kubelet").exists()
    [listed] = list_builds(session(host, profile))
    assert listed.partial_upload and listed.sha256 is None and listed.version is None
    # the next attempt uploads whole over the leftover
    conn = Counting(host)
    assert place_build(session(host, profile, conn), BUILD, local(tmp_path, data), print)
    assert conn.uploads == 5
    assert (folder(profile) / "kubelet").read_bytes() == data
    assert not partial.exists()


def test_a_differing_build_abtest_did_not_place_is_refused(node: Node, tmp_path: Path) -> None:
    host, profile = node
    theirs = kubelet(pad=10)
    folder(profile).mkdir(parents=True)
    (folder(profile) / "kubelet").write_bytes(theirs)
    with pytest.raises(UserError, match="not a build abtest placed") as refused:
        place_build(session(host, profile), BUILD, local(tmp_path, kubelet()), print)
    assert "\n" not in str(refused.value)
    assert "place_builds: false" in str(refused.value)
    assert (folder(profile) / "kubelet").read_bytes() == theirs
    [listed] = list_builds(session(host, profile))
    assert not listed.placed_by_abtest


def test_a_build_abtest_placed_is_replaced_by_a_newer_local_build(
    node: Node, tmp_path: Path
) -> None:
    host, profile = node
    assert place_build(session(host, profile), BUILD, local(tmp_path, kubelet(pad=10)), print)
    newer = kubelet(pad=20)
    assert place_build(session(host, profile), BUILD, local(tmp_path, newer), print)
    assert (folder(profile) / "kubelet").read_bytes() == newer


def test_a_build_saying_another_version_fails_the_placement(node: Node, tmp_path: Path) -> None:
    host, profile = node
    with pytest.raises(NodeError, match=r"not Kubernetes v1\.35\.4"):
        place_build(session(host, profile), BUILD, local(tmp_path, kubelet("v1.36.3")), print)


def test_remove_takes_only_what_abtest_placed(node: Node, tmp_path: Path) -> None:
    host, profile = node
    other = parse_build_name("v1.36.3", "test")
    theirs = Path(profile.kubelet_builds_dir or "") / "v1.36.3"
    theirs.mkdir(parents=True)
    (theirs / "kubelet").write_bytes(kubelet("v1.36.3"))
    with pytest.raises(UserError, match="was not placed by abtest"):
        remove_build(session(host, profile), other)
    assert (theirs / "kubelet").exists()
    with pytest.raises(UserError, match="does not exist"):
        remove_build(session(host, profile), parse_build_name("v1.34.4", "test"))
    assert place_build(session(host, profile), BUILD, local(tmp_path, kubelet()), print)
    # changed by hand after abtest placed it: no longer abtest's
    binary = folder(profile) / "kubelet"
    binary.write_bytes(kubelet(pad=5))
    with pytest.raises(UserError, match="was not placed by abtest"):
        remove_build(session(host, profile), BUILD)
    with pytest.raises(UserError, match="not a build abtest placed"):
        place_build(session(host, profile), BUILD, local(tmp_path, kubelet()), print)
    binary.write_bytes(kubelet())  # the bytes abtest placed again: its record holds again
    assert remove_build(session(host, profile), BUILD) == str(folder(profile))
    assert not folder(profile).exists()


def test_remove_refuses_the_running_kubelets_binary(node: Node, tmp_path: Path) -> None:
    host, profile = node
    assert place_build(session(host, profile), BUILD, local(tmp_path, kubelet()), print)
    own = folder(profile) / "kubelet"
    running = dataclasses.replace(profile, kubelet_binary_path=str(own))
    with pytest.raises(UserError, match="running kubelet"):
        remove_build(session(host, running), BUILD)
    assert own.exists()


def fake_local(path: Path, data: bytes, calls: list[str]) -> Callable[..., LocalBuild]:
    def local_build(build: BuildName, goarch: str | None, say: object) -> LocalBuild:
        calls.append(f"{build}/{goarch}")
        path.write_bytes(data)
        return LocalBuild(build, goarch, path, hashlib.sha256(data).hexdigest())

    return local_build


def test_the_preflight_places_under_the_node_lock_for_the_nodes_arch(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, profile = node
    calls: list[str] = []
    monkeypatch.setattr(build_placing, "local_build", fake_local(tmp_path / "k", kubelet(), calls))
    monkeypatch.setattr(build_placing, "cached_path", lambda build, goarch: tmp_path / "k")
    seen_lock: list[bool] = []

    class LockWatching(FakeConnection):
        def run(self, argv: list[str], **kw: Any) -> Result:
            if "abtest-upload" in argv[-1]:
                seen_lock.append(host.lock_path.exists())
            return super().run(argv, **kw)

    s = NodeSession(profile, connection=LockWatching(host))
    placed = build_placing.place_needed(profile, [BUILD, BUILD], print, session=s)
    assert placed.uploaded == ("v1.35.4",) and placed.present == ()
    machine = os.uname().machine
    assert calls == [f"v1.35.4/{ {'x86_64': 'amd64', 'aarch64': 'arm64'}[machine] }"]
    assert seen_lock and all(seen_lock)  # every upload under the node lock
    assert not host.lock_path.exists()  # released after
    again = build_placing.place_needed(
        profile, [BUILD], print, session=NodeSession(profile, connection=FakeConnection(host))
    )
    assert again.uploaded == () and again.present == ("v1.35.4",)


def test_place_builds_false_places_nothing_and_the_preflight_says_how(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, profile = node
    off = dataclasses.replace(profile, place_builds=False)
    monkeypatch.setattr(build_placing, "local_build", lambda *a: pytest.fail("built"))
    s = NodeSession(off, connection=FakeConnection(host))
    assert build_placing.place_needed(off, [BUILD], print, session=s) == build_placing.Placed()
    assert not Path(off.kubelet_builds_dir or "").exists()
    arm = Arm("old", frozenset(), kubelet=BUILD)
    [problem] = arm_problems([arm], off, {}, None)
    assert "does not exist on" in problem
    assert "set kubelet.place_builds: true" in problem
    [today] = arm_problems([arm], profile, {}, None)
    assert "set kubelet.place_builds" not in today


def test_a_placement_refusal_is_one_preflight_problem(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, profile = node
    folder(profile).mkdir(parents=True)
    (folder(profile) / "kubelet").write_bytes(kubelet(pad=1))
    monkeypatch.setattr(build_placing, "local_build", fake_local(tmp_path / "k", kubelet(), []))
    monkeypatch.setattr(build_placing, "cached_path", lambda build, goarch: tmp_path / "k")
    monkeypatch.setattr(
        build_placing,
        "NodeSession",
        lambda p, **kw: NodeSession(p, connection=FakeConnection(host)),
    )
    [problem] = build_placing.placement_problems(profile, [BUILD], print, False)
    assert problem.startswith("placing kubelet builds: ") and "not a build abtest placed" in problem
    assert not host.lock_path.exists()


def dead_lock(purpose: str) -> str:
    """A lock a killed controller of this host left: its pid no longer runs."""
    from abtest.node.lock import new_info

    info = dataclasses.replace(new_info(purpose), pid=2**22 - 7, pid_start="1")
    return info.to_json()


@pytest.mark.parametrize(
    ("purpose", "taken"), [(build_placing.PURPOSE, True), ("sweep run-1", False)]
)
def test_only_a_dead_placements_lock_is_taken_over(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, purpose: str, taken: bool
) -> None:
    host, profile = node
    host.lock_path.write_text(dead_lock(purpose))
    monkeypatch.setattr(build_placing, "local_build", fake_local(tmp_path / "k", kubelet(), []))
    monkeypatch.setattr(build_placing, "cached_path", lambda build, goarch: tmp_path / "k")
    monkeypatch.setattr(
        build_placing,
        "NodeSession",
        lambda p, **kw: NodeSession(p, connection=FakeConnection(host)),
    )
    problems = build_placing.placement_problems(profile, [BUILD], print, False)
    if taken:
        assert problems == [] and (folder(profile) / "kubelet").exists()
        assert not host.lock_path.exists()
    else:
        [problem] = problems
        assert "node lock" in problem and "node restore" in problem
        assert not folder(profile).exists() and "sweep run-1" in host.lock_path.read_text()


@pytest.mark.parametrize("value", ["abc", "8", "1e3", "100000"])
def test_a_bad_chunk_size_is_one_line_before_any_upload(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    host, profile = node
    monkeypatch.setenv("ABTEST_UPLOAD_CHUNK_KIB", value)
    with pytest.raises(UserError, match="ABTEST_UPLOAD_CHUNK_KIB") as refused:
        place_build(session(host, profile), BUILD, local(tmp_path, kubelet()), print)
    assert len(refused.value.lines()) == 1
    assert not (folder(profile) / UPLOAD_FILE).exists()
