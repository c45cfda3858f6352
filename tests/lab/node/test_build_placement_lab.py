"""Builds placed for you (issue 47 part 1) on the real lab: the lab's second node reached as a
remote node (its own SSH alias), through a copy of its profile whose builds_dir is a fresh
empty folder, from a folder outside the repo. `bisect --builds v1.35.4,v1.36.3` places both
(sha256 and --version checked on the node), measures, and puts the node's own kubelet back; the
same command again uploads nothing. Then a controller SIGKILLed mid-upload (a `regress` between
the same builds: the same pre-flight places them): its partial file is never taken for a
build, and the same command places the build whole.

The builds are the lab's cached v1.35.4 and v1.36.3 kubelets (~/.cache/abtest; a missing one
is built first, 5-15 min on 2 cores)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from abtest.config.build_names import parse_build_name
from abtest.config.playbook import NodeProfile, load_profile
from abtest.lab.local_builds import local_build
from abtest.node.build_placement import PLACED_FILE, UPLOAD_FILE
from abtest.node.session import NodeSession

pytestmark = pytest.mark.lab

WORKTREE = Path(__file__).resolve().parents[3]
NODE2_PROFILE = Path("/var/lib/abtest-lab/nodes/abtest-lab-2/profile.yaml")
BUILDS = ("v1.35.4", "v1.36.3")
PLAYBOOK = """\
playbook: place-builds
description: the smallest gate that still measures (3 pods, one look at 2 blocks)
catalog: lab
design: baseline
sizes: [3]
rounds: 2
max_rounds: 2
margin_pct: 5
confidence: 0.95
metrics: [batch_ready_s]
seed: 20261204
warmup: false
namespace: abtest
generator:
  qps: 1000
  concurrency: 150
  timeout_s: 300
  observe_s: 2
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(WORKTREE), "NO_COLOR": "1", **extra}


def _abtest(cwd: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "abtest", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def remote(lab_up: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The lab at 2 nodes; node 2's profile copied with a fresh, empty builds_dir; a folder
    outside the repo to run from, with the playbook in it."""
    had_two = NODE2_PROFILE.is_file()
    folder = tmp_path_factory.mktemp("place")
    fresh = Path(f"/var/tmp/abtest-place-{secrets.token_hex(4)}/builds")
    try:
        if not had_two:
            up = _abtest(folder, "lab", "up", "--nodes", "2", timeout=900)
            assert up.returncode == 0, up.stdout + up.stderr
        text = NODE2_PROFILE.read_text()
        assert "builds_dir: /var/lib/abtest-lab/kubelets\n" in text
        text = text.replace("builds_dir: /var/lib/abtest-lab/kubelets\n", f"builds_dir: {fresh}\n")
        profile = folder / "remote-2.yaml"
        profile.write_text(text.replace("profile: lab-2\n", "profile: remote-2\n"))
        (folder / "place.yaml").write_text(PLAYBOOK)
        loaded = load_profile(str(profile))
        yield {"cwd": folder, "profile": str(profile), "loaded": loaded, "fresh": fresh}
    finally:
        shutil.rmtree(fresh.parent, ignore_errors=True)
        if not had_two:
            down = _abtest(folder, "lab", "up", "--nodes", "1", timeout=900)
            assert down.returncode == 0, down.stdout + down.stderr


def _regress(remote: dict[str, Any], db: str) -> list[str]:
    return [
        "regress", "--reference", f"binary={BUILDS[0]}", "--candidate", f"binary={BUILDS[1]}",
        "--playbook", "place.yaml", "--profile", remote["profile"], "--db", db,
    ]  # fmt: skip


def _bisect(remote: dict[str, Any], db: str) -> list[str]:
    return [
        "bisect", "--builds", ",".join(BUILDS), "--playbook", "place.yaml", "--size", "3",
        "--profile", remote["profile"], "--db", db,
    ]  # fmt: skip


def _node_sha(profile: NodeProfile, path: str) -> str:
    with NodeSession(profile) as node:
        res = node.run(["sha256sum", "--", path]).check("sha256sum")
    return res.stdout.split()[0]


def _listed(remote: dict[str, Any]) -> dict[str, dict[str, Any]]:
    done = _abtest(remote["cwd"], "kubelets", "list", "--profile", remote["profile"], "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {b["name"]: b for b in json.loads(done.stdout)}


def _placed_at(remote: dict[str, Any], build: str) -> str:
    return str(json.loads((remote["fresh"] / build / PLACED_FILE).read_text())["placed_at"])


def _own_kubelet_back(profile: NodeProfile, own: str) -> None:
    assert _node_sha(profile, profile.kubelet_binary_path) == own
    assert not Path(profile.kubelet_binary_path + ".abtest-original").exists()
    assert not Path(profile.lock_path).exists(), "the node is unlocked"


def _local_sha(name: str) -> str:
    return local_build(parse_build_name(name, "test"), "amd64", print).sha256


def test_bisect_places_both_builds_then_uploads_nothing_again(remote: dict[str, Any]) -> None:
    profile: NodeProfile = remote["loaded"]
    own = _node_sha(profile, profile.kubelet_binary_path)
    assert not remote["fresh"].exists()  # neither build is on the node
    started = time.monotonic()
    first = _abtest(remote["cwd"], *_bisect(remote, "x.sqlite"))
    out = first.stdout + first.stderr
    assert first.returncode in (0, 3), out  # a conclusion, whichever: not 2 or 4
    for build in BUILDS:
        assert f"placing kubelet {build} on abtest-lab-2" in out, out
        assert f"kubelet {build} placed on abtest-lab-2: sha256" in out, out
    listed = _listed(remote)
    for build in BUILDS:
        entry = listed[build]
        assert entry["placed_by_abtest"] and not entry["partial_upload"], entry
        assert entry["sha256"] == _local_sha(build)
        assert entry["version"] == f"Kubernetes {build}"
    _own_kubelet_back(profile, own)
    when = {b: _placed_at(remote, b) for b in BUILDS}
    print(f"first bisect with both placements: {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    again = _abtest(remote["cwd"], *_bisect(remote, "y.sqlite"))
    out = again.stdout + again.stderr
    assert again.returncode in (0, 3), out
    assert "placing kubelet" not in out, out
    assert "kubelet builds on abtest-lab-2 already: v1.35.4, v1.36.3" in out, out
    assert {b: _placed_at(remote, b) for b in BUILDS} == when  # the records untouched
    _own_kubelet_back(profile, own)
    print(f"second bisect, nothing uploaded: {time.monotonic() - started:.0f} s")


def test_a_kill_mid_upload_leaves_no_build_and_the_next_run_places_it_whole(
    remote: dict[str, Any],
) -> None:
    profile: NodeProfile = remote["loaded"]
    own = _node_sha(profile, profile.kubelet_binary_path)
    cwd, fresh = remote["cwd"], remote["fresh"]
    if (fresh / BUILDS[0] / "kubelet").exists():
        gone = _abtest(cwd, "kubelets", "remove", BUILDS[0], "--profile", remote["profile"])
        assert gone.returncode == 0, gone.stdout + gone.stderr
    partial = fresh / BUILDS[0] / UPLOAD_FILE
    started = time.monotonic()
    # small chunks: the upload takes long enough to be caught in the middle
    proc = subprocess.Popen(
        [sys.executable, "-m", "abtest", *_regress(remote, "k.sqlite")],
        cwd=cwd,
        env=_env(ABTEST_UPLOAD_CHUNK_KIB="256"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while not (partial.exists() and partial.stat().st_size >= 4 << 20):
            assert proc.poll() is None, f"the controller ended (exit {proc.returncode}) first"
            assert time.monotonic() < deadline, "never saw the upload under way"
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    size = partial.stat().st_size
    whole = local_build(parse_build_name(BUILDS[0], "test"), "amd64", print).binary
    assert 0 < size < whole.stat().st_size  # killed in the middle
    assert not (fresh / BUILDS[0] / "kubelet").exists()  # the partial file is no build
    entry = _listed(remote)[BUILDS[0]]
    assert entry["partial_upload"] and entry["sha256"] is None and entry["version"] is None
    again = _abtest(cwd, *_regress(remote, "k2.sqlite"))
    out = again.stdout + again.stderr
    assert again.returncode in (0, 1, 3), out
    assert f"placing kubelet {BUILDS[0]} on abtest-lab-2" in out, out
    entry = _listed(remote)[BUILDS[0]]
    assert entry["placed_by_abtest"] and not entry["partial_upload"], entry
    assert entry["sha256"] == _local_sha(BUILDS[0])
    assert not partial.exists()
    _own_kubelet_back(profile, own)
    print(f"killed mid-upload ({size >> 20} MiB sent), then placed whole: "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
