"""Kubelets built for another node's architecture (issue 47): their own cache keys, GOARCH in
the go build's environment, cgo off; the controller's own architecture keeps the lab's keys."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from abtest.config.build_names import parse_build_name
from abtest.config.kubelet_series import load_series
from abtest.errors import LabError
from abtest.lab import binaries, local_builds, patched_kubelets


@pytest.fixture(autouse=True)
def amd64_controller(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.setenv("ABTEST_CACHE", str(tmp_path / "cache"))


def test_a_release_for_another_arch_is_cached_beside_the_native_one(tmp_path: Path) -> None:
    release = parse_build_name("v1.35.4", "x").release
    native = binaries.binary_set(release, ("kubelet",))
    same = binaries.binary_set(release, ("kubelet",), "amd64")
    arm = binaries.binary_set(release, ("kubelet",), "arm64")
    assert native.directory.name == same.directory.name == "k8s-v1.35.4_r3"
    assert (native.goarch, same.goarch) == (None, None)
    assert arm.directory.name == "k8s-v1.35.4_r3-arm64" and arm.goarch == "arm64"
    assert arm.path("kubelet") == arm.directory / "kubelet"


def test_a_series_for_another_arch_is_cached_by_digest_and_arch() -> None:
    series = load_series(parse_build_name("v1.36.3+agc", "x"))
    native = patched_kubelets.cached_dir(series)
    assert patched_kubelets.cached_dir(series, "amd64") == native
    assert patched_kubelets.cached_dir(series, "arm64").name == native.name + "-arm64"


class Progress:
    def __init__(self) -> None:
        self.envs: list[dict[str, str]] = []

    def call(self, argv, cwd, env):  # type: ignore[no-untyped-def]
        self.envs.append(env)
        return 0, ""


def test_go_builds_for_the_arch_with_cgo_off(tmp_path: Path) -> None:
    progress = Progress()
    out = tmp_path / "kubelet"
    (tmp_path / "kubelet.tmp").write_bytes(b"x")  # what `go build -o` would have written
    binaries.go_build(tmp_path, "k8s.io/kubernetes/cmd/kubelet", out, progress, goarch="arm64")  # type: ignore[arg-type]
    binaries.run_go(["version"], tmp_path, progress)  # type: ignore[arg-type]
    assert progress.envs[0]["GOARCH"] == "arm64" and progress.envs[0]["CGO_ENABLED"] == "0"
    assert progress.envs[1].get("GOARCH") == os.environ.get("GOARCH")  # native: as given
    assert out.read_bytes() == b"x"


def test_only_the_kubelet_is_built_for_another_arch() -> None:
    release = parse_build_name("v1.35.4", "x").release
    with pytest.raises(LabError, match="only Kubernetes commands"):
        binaries.ensure_binaries(release=release, names=("kubelet", "etcd"), goarch="arm64")


def test_a_cached_build_is_found_for_its_arch_only(tmp_path: Path) -> None:
    build = parse_build_name("v1.35.4", "x")
    assert local_builds.cached_path(build, "arm64") is None
    arm = binaries.binary_set(build.release, ("kubelet",), "arm64").path("kubelet")
    arm.parent.mkdir(parents=True)
    arm.write_bytes(b"arm64 kubelet")
    assert local_builds.cached_path(build, "arm64") is None  # not executable: not a build
    arm.chmod(0o755)
    assert local_builds.cached_path(build, "arm64") == arm
    assert local_builds.cached_path(build, "amd64") is None
    made = local_builds.local_build(build, "arm64", print)
    assert made.binary == arm and made.source is None
    assert made.sha256 == hashlib.sha256(b"arm64 kubelet").hexdigest()
