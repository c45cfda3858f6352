"""kubelet.place_builds in a node profile, and the node architecture's GOARCH (issue 47)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.config import goarch
from abtest.config.playbook import NodeProfile, load_profile
from abtest.errors import ConfigError, UserError

BASE = "node_name: n\nssh: {host: h}\nkubelet: {config_path: /a, binary_path: /b%s}\n"


def profile(tmp_path: Path, extra: str) -> NodeProfile:
    path = tmp_path / "p.yaml"
    path.write_text(BASE % extra)
    return load_profile(str(path))


def test_placement_is_on_unless_the_profile_says_false(tmp_path: Path) -> None:
    assert profile(tmp_path, ", builds_dir: /opt/b").place_builds is True
    assert profile(tmp_path, ", builds_dir: /opt/b, place_builds: false").place_builds is False


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (", place_builds: 'no'", "kubelet.place_builds: expected true or false, got str"),
        (", place_builds: 1", "kubelet.place_builds: expected true or false, got int"),
        (", place_build: true", "kubelet.place_build: unknown key"),
    ],
)
def test_a_bad_place_builds_is_one_line(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        profile(tmp_path, extra)
    assert message in err.value.one_line()
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize(
    ("machine", "expected"),
    [("x86_64", "amd64"), ("aarch64", "arm64"), ("arm64\n", "arm64"), ("s390x", "s390x")],
)
def test_uname_names_map_to_go(machine: str, expected: str) -> None:
    assert goarch.goarch_of_machine(machine, "node n") == expected


def test_an_architecture_without_a_kubelet_is_refused_in_one_line() -> None:
    with pytest.raises(UserError) as refused:
        goarch.goarch_of_machine("mips", "node n")
    assert refused.value.lines()[0].startswith("node n: the node's architecture 'mips'")
    with pytest.raises(UserError, match="is not a GOARCH"):
        goarch.checked_goarch("x86_64", "--goarch")
    assert goarch.checked_goarch("arm64", "--goarch") == "arm64"


def test_only_another_architecture_gets_its_own_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    assert goarch.native_goarch() == "amd64"
    assert goarch.cache_suffix(None) == goarch.cache_suffix("amd64") == ""
    assert goarch.cache_suffix("arm64") == "-arm64"
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert goarch.cache_suffix("arm64") == "" and goarch.cache_suffix("amd64") == "-amd64"
