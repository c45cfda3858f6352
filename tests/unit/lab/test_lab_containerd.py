"""The lab's own containerd (v1.7.28, built like etcd), without a lab: where the build is
cached, how it is built and stamped, the PATH containerd starts with (its own shim first),
what `lab status` reads from the CRI Version call, and a config with no deprecated key."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from abtest.config.domain import Release
from abtest.lab import (
    binaries,
    components,
    containerd_path,
    control,
    files,
    host,
    images,
    layout,
    runtimes,
)
from abtest.lab.layout import LabState, Node, Paths
from abtest.lab.nodes import NodeStatus


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ABTEST_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "abtest" / "bin"


# --- the build ------------------------------------------------------------------------------


def test_containerd_is_cached_once_for_every_release(cache: Path) -> None:
    one = binaries.binary_set(Release(1, 34, 4))
    two = binaries.binary_set(Release(1, 36, 3))
    for name in binaries.CONTAINERD_COMMANDS:
        assert one.path(name) == two.path(name) == cache / "containerd-v1.7.28" / name
    # beside etcd and crictl, not inside a release's directory
    assert one.path("etcd").parent.parent == one.path("containerd").parent.parent
    assert one.path("kubelet").parent != one.path("containerd").parent


def test_the_lab_needs_all_three_containerd_commands(cache: Path) -> None:
    assert set(binaries.CONTAINERD_COMMANDS) <= set(binaries.ALL_NAMES)
    assert set(binaries.binary_set().missing()) >= set(binaries.CONTAINERD_COMMANDS)
    # a kubelet placed as an arm needs no containerd
    assert binaries.binary_set(names=("kubelet",)).missing() == ["kubelet"]


@pytest.mark.parametrize(
    ("missing", "steps"),
    [
        (
            list(binaries.ALL_NAMES),
            [*binaries.KUBE_COMMANDS, "etcd", "crictl", "containerd", "toxiproxy-server"],
        ),
        (["toxiproxy-server"], ["toxiproxy-server"]),
        (["ctr"], ["containerd"]),
        (["containerd-shim-runc-v2", "kubelet"], ["kubelet", "containerd"]),
        (["etcd"], ["etcd"]),
    ],
)
def test_containerd_commands_are_one_build_step(missing: list[str], steps: list[str]) -> None:
    assert binaries.build_steps(missing) == steps


def test_versions_per_binary() -> None:
    release = Release(1, 36, 3)
    assert binaries.version_of("kubelet", release) == "v1.36.3"
    assert binaries.version_of("etcd", release) == binaries.ETCD_VERSION
    for name in binaries.CONTAINERD_COMMANDS:
        assert binaries.version_of(name, release) == "v1.7.28"
    assert binaries.version_of("toxiproxy-server", release) == "v2.5.0"


def test_containerd_is_stamped_like_an_upstream_release() -> None:
    flags = binaries.containerd_ldflags()
    pkg = "github.com/containerd/containerd/version"
    # the CRI Version call reports version.Version; the kubelet shows containerd://1.7.28
    assert f"-X {pkg}.Version=v1.7.28" in flags
    assert f"-X {pkg}.Revision={binaries.CONTAINERD_REVISION}" in flags
    assert len(binaries.CONTAINERD_REVISION) == 40


def test_go_build_arguments_carry_the_tags_only_when_given(tmp_path: Path) -> None:
    out = tmp_path / "containerd.tmp"
    args = binaries.go_build_args("pkg/cmd", out, "-s -w", binaries.CONTAINERD_TAGS)
    assert args == [
        "build",
        "-trimpath",
        "-tags=no_btrfs no_devmapper no_zfs no_aufs",
        "-ldflags=-s -w",
        "-o",
        str(out),
        "pkg/cmd",
    ]
    assert not any(a.startswith("-tags") for a in binaries.go_build_args("p", out))


FAKE_GO = r"""#!/usr/bin/env bash
set -euo pipefail
printf '%s\n' "$PWD :: $*" >> "$FAKE_GO_LOG"
case "$1" in
  get)  : > go.sum ;;
  build)
        out=""; while (($#)); do [[ $1 == -o ]] && out=$2; shift; done
        printf '#!/bin/sh\n' > "$out"; chmod +x "$out" ;;
  *) echo "fake go: unexpected $*" >&2; exit 2 ;;
esac
"""


def test_the_containerd_build_from_an_empty_cache(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a new machine's first `lab up` runs: a throwaway module requiring containerd,
    its three commands fetched and built with the tags and the release stamp, in one step."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "go").write_text(FAKE_GO)
    (fakebin / "go").chmod(0o755)
    log = tmp_path / "go.log"
    monkeypatch.setenv("PATH", f"{fakebin}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    lines: list[str] = []
    bins = binaries.ensure_binaries(lines.append, live=False, names=binaries.CONTAINERD_COMMANDS)
    assert bins.missing() == []
    workdir = cache.parent / "build" / "containerd-v1.7.28"
    assert "require github.com/containerd/containerd v1.7.28\n" in (workdir / "go.mod").read_text()
    calls = log.read_text().splitlines()
    mod = "github.com/containerd/containerd"
    assert calls[0] == (
        f"{workdir} :: get -tags=no_btrfs no_devmapper no_zfs no_aufs "
        + " ".join(f"{mod}/cmd/{c}@v1.7.28" for c in binaries.CONTAINERD_COMMANDS)
    )
    builds = calls[1:]
    assert [c.rsplit(" ", 1)[1] for c in builds] == [
        f"{mod}/cmd/{c}" for c in binaries.CONTAINERD_COMMANDS
    ]
    for call in builds:
        assert "-tags=no_btrfs no_devmapper no_zfs no_aufs" in call
        assert f"-X {mod}/version.Version=v1.7.28" in call
    text = "\n".join(lines)
    assert "(2 steps)" in text and "  containerd ... (usually ~" in text
    assert f"cached in {cache / 'containerd-v1.7.28'} (" in text
    # built once: the next call builds nothing
    log.unlink()
    binaries.ensure_binaries(lines.append, live=False, names=binaries.CONTAINERD_COMMANDS)
    assert not log.exists()


# --- how containerd starts ------------------------------------------------------------------


def test_the_lab_bin_directory_comes_first_on_containerds_path() -> None:
    bin_dir = Path("/var/lib/abtest-lab/bin")
    path = containerd_path.containerd_path(bin_dir, "/usr/bin:/var/lib/abtest-lab/bin:/opt/x")
    parts = path.split(":")
    assert parts[0] == str(bin_dir)
    assert parts.count(str(bin_dir)) == 1
    # the caller's order stays, and runc's directory is there even if the caller lacked it
    assert parts[1:3] == ["/usr/bin", "/opt/x"] and "/usr/sbin" in parts
    assert containerd_path.containerd_path(bin_dir, None).split(":")[0] == str(bin_dir)
    assert "" not in containerd_path.containerd_path(bin_dir, "::/usr/bin:").split(":")


@pytest.mark.parametrize("index", [1, 2])
def test_every_node_runs_the_labs_containerd_from_its_directory(index: int) -> None:
    paths = Paths(root=Path("/s"), run=Path("/r"))
    node = Node(index, paths)
    spec = components.argv_for("containerd", paths, {}, node)
    assert spec.argv == ("/s/bin/containerd", f"--config={node.containerd_dir / 'config.toml'}")
    assert spec.env["PATH"].split(":")[0] == "/s/bin"
    # containerd looks for the shim in its working directory before PATH
    assert spec.cwd == Path("/s/bin")
    assert components.EXPECT["containerd"] in spec.argv[0]


def test_a_started_process_gets_the_specs_environment_and_directory(tmp_path: Path) -> None:
    from abtest.lab.processes import read_pid, start, stop

    out = tmp_path / "out"
    argv = ("/bin/sh", "-c", f'echo "$PATH $(pwd)" > {out}; exec sleep 30')
    start("probe", argv, tmp_path / "probe.log", tmp_path, env={"PATH": "/x:/bin"}, cwd=tmp_path)
    try:
        for _ in range(100):
            if out.exists() and out.read_text():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert out.read_text().split() == ["/x:/bin", str(tmp_path)]
    finally:
        assert read_pid(tmp_path, "probe") is not None
        stop("probe", tmp_path, "sleep")


def test_images_are_imported_with_the_labs_own_ctr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    files.make_dir(paths.root)
    files.make_dir(paths.root / "images")
    seen: list[list[str]] = []

    def fake_run(argv: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        listed = f"{layout.BUSYBOX_IMAGE}\n{layout.PAUSE_IMAGE}\n"
        return subprocess.CompletedProcess(argv, 0, listed, "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(images, "_rootfs_layer", lambda _busybox: b"layer")
    images.import_images(paths)
    assert seen and all(argv[0] == str(paths.bin / "ctr") for argv in seen)


def test_debian_containerd_is_not_a_package_the_lab_needs() -> None:
    assert "containerd" not in host.PACKAGES
    bootstrap = (Path(__file__).parents[3] / "scripts" / "bootstrap").read_text()
    pkgs = bootstrap.split("PKGS=(", 1)[1].split(")", 1)[0].split()
    assert "containerd" not in pkgs and "runc" in pkgs


# --- the config has no key containerd 1.7 deprecates ------------------------------------------

# containerd 1.7's deprecation warnings for CRI config keys (pkg/deprecation), by the key that
# raises each; `ctr deprecations list` on the lab shows none (tests/lab/lab/test_lab.py).
DEPRECATED_KEYS = {
    "systemd_cgroup",
    "untrusted_workload_runtime",
    "default_runtime",
    "runtime_engine",
    "runtime_root",
    "mirrors",
    "auths",
    "configs",
    "CriuPath",
}


def _keys(table: dict[str, Any]) -> set[str]:
    out = set(table)
    for value in table.values():
        if isinstance(value, dict):
            out |= _keys(value)
    return out


@pytest.mark.parametrize("index", [1, 2])
def test_the_containerd_config_is_version_2_without_deprecated_keys(
    tmp_path: Path, index: int
) -> None:
    node = Node(index, Paths(root=tmp_path / "state", run=tmp_path / "run"))
    files.make_dir(node.containerd_dir)
    with host.write_containerd_config(node).open("rb") as fh:
        conf = tomllib.load(fh)
    assert conf["version"] == 2
    assert not _keys(conf) & DEPRECATED_KEYS


# --- what lab status and lab up say ------------------------------------------------------------

CRICTL_VERSION_17 = "Version:  0.1.0\nRuntimeName:  containerd\nRuntimeVersion:  v1.7.28\n"
CRICTL_VERSION_16 = "Version:  0.1.0\nRuntimeName:  containerd\nRuntimeVersion:  1.6.20~ds1\n"


def test_the_runtime_version_from_crictl_version() -> None:
    assert runtimes.runtime_version_from(CRICTL_VERSION_17) == "v1.7.28"
    assert runtimes.runtime_version_from(CRICTL_VERSION_16) == "1.6.20~ds1"
    assert runtimes.runtime_version_from("RuntimeName: containerd\n") is None
    assert runtimes.runtime_version_from("RuntimeVersion:\n") is None


def _node(version: str | None) -> NodeStatus:
    names = components.NODE_COMPONENTS
    return NodeStatus(
        "abtest-lab",
        1,
        "p",
        {n: 1 for n in names},
        {n: True for n in names},
        True,
        containerd_version=version,
    )


def test_status_json_has_each_nodes_containerd_version() -> None:
    out = _node("v1.7.28").as_json()
    assert out["containerd_version"] == "v1.7.28" and out["containerd_version_error"] is None


def test_up_on_a_running_lab_says_when_its_containerd_is_not_the_labs() -> None:
    assert control.containerd_notes((_node("v1.7.28"), _node(None))) == []
    (note,) = control.containerd_notes((_node("1.6.20~ds1"),))
    assert "1.6.20~ds1" in note and "v1.7.28" in note and "lab down && abtest lab up" in note


def test_a_state_from_before_the_labs_containerd_loads(tmp_path: Path) -> None:
    paths = Paths(root=tmp_path / "state", run=tmp_path / "run")
    files.make_dir(paths.root)
    files.write_file(paths.state_file, '{"ports": {}, "kubernetes": "v1.36.3"}')
    state = LabState.load(paths)
    assert state is not None and state.containerd is None
    state.containerd = binaries.CONTAINERD_VERSION
    state.save(paths)
    again = LabState.load(paths)
    assert again is not None and again.containerd == "v1.7.28"
