"""Kubelet patch series as builds: names, the series folder checked whole, the patches applied
to a copy of the release's source in order, and every bad input refused before a build.

The source here is a small tree shaped like k8s.io/kubernetes (a pkg/features/kube_features.go
and one kubelet file); the real release's source is built in the lab tier
(tests/lab/lab/test_patched_kubelet.py)."""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

import pytest

from abtest.config.domain import Release, build_version_of
from abtest.config.kubelet_series import (
    BuildName,
    PatchSeries,
    load_series,
    parse_build_name,
    series_prefixes,
    shipped_series,
)
from abtest.errors import UserError
from abtest.lab.patched_kubelets import cached_dir, patched_tree

FEATURES = """package features

const (
	// KubeletTracing is upstream's.
	KubeletTracing featuregate.Feature = "KubeletTracing"
)
"""
STATUS = "package status\n\nfunc workers() int {\n\treturn 1\n}\n"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "k8s-src"
    (src / "pkg" / "features").mkdir(parents=True)
    (src / "pkg" / "kubelet" / "status").mkdir(parents=True)
    (src / "pkg" / "features" / "kube_features.go").write_text(FEATURES)
    (src / "pkg" / "kubelet" / "status" / "status.go").write_text(STATUS)
    return src


def _patch(old: str, new: str, path: str) -> str:
    """A one-hunk diff of ``path`` from ``old`` to ``new`` (whole-file contents)."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    body = "".join(difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}"))
    return f"diff --git a/{path} b/{path}\n" + body


def _series(root: Path, patches: dict[str, str], release: str = "v1.36.3") -> Path:
    folder = root / "my-series"
    folder.mkdir(parents=True)
    (folder / "series.yaml").write_text(f"release: {release}\n")
    for name, text in patches.items():
        (folder / name).write_text(text)
    return folder


GATE_PATCH = _patch(
    FEATURES,
    FEATURES.replace(
        ")\n",
        "\n\t// KubeletParallelThing syncs in parallel.\n"
        '\tKubeletParallelThing featuregate.Feature = "KubeletParallelThing"\n)\n',
    ),
    "pkg/features/kube_features.go",
)
WORKERS_PATCH = _patch(
    STATUS, STATUS.replace("return 1", "return 5"), "pkg/kubelet/status/status.go"
)


def _load(folder: Path, release: str = "v1.36.3") -> PatchSeries:
    return load_series(parse_build_name(f"{release}+{folder}", "BUILD"))


def test_build_names() -> None:
    assert parse_build_name("v1.36.3", "x") == BuildName(Release(1, 36, 3))
    agc = parse_build_name("v1.36.3+agc", "x")
    assert (agc.name, agc.series) == ("v1.36.3+agc", "agc")
    assert agc.folder is not None and (agc.folder / "series.yaml").is_file()
    assert "agc" in shipped_series()
    own = parse_build_name("v1.36.3+./some/my-series", "x")
    assert own.name == "v1.36.3+my-series" and own.folder is not None
    assert own.folder.name == "my-series" and own.folder.is_absolute()
    assert build_version_of("Kubernetes v1.36.3+agc") == "v1.36.3+agc"
    assert build_version_of("Kubernetes v1.36.3") == "v1.36.3"


@pytest.mark.parametrize(
    ("text", "paths", "says"),
    [
        ("agc", True, r"neither a kubelet release nor a release\+series"),
        ("v1.36.3+", True, "is not a series name"),
        ("v1.36.3+AGC", True, "is not a series name"),
        ("v1.36.3+agc\n", True, "is not a series name"),
        ("v1.36.3+a;b", True, "is not a series name"),
        ("v1.36.3-rc.1+agc", True, "neither a kubelet release"),
        ("v1.36.3+./x", False, "a series folder cannot be named here"),
    ],
)
def test_bad_build_names(text: str, paths: bool, says: str) -> None:
    with pytest.raises(UserError, match=says):
        parse_build_name(text, "BUILD", paths=paths)


def test_unknown_shipped_series_is_refused_naming_the_shipped_ones() -> None:
    with pytest.raises(UserError, match=r"unknown patch series 'nosuch'.*agc"):
        load_series(parse_build_name("v1.36.3+nosuch", "BUILD"))


def test_a_series_loads_in_name_order_with_hashes_and_gates(tmp_path: Path) -> None:
    folder = _series(tmp_path, {"0002-workers.patch": WORKERS_PATCH, "0001-gate.patch": GATE_PATCH})
    (folder / "README.md").write_text("what each patch does\n")
    series = _load(folder)
    assert [p.file for p in series.patches] == ["0001-gate.patch", "0002-workers.patch"]
    assert series.gates == ("KubeletParallelThing",)
    assert series.patches[0].sha256 == hashlib.sha256(GATE_PATCH.encode()).hexdigest()
    assert series.patches[1].files == ("pkg/kubelet/status/status.go",)


def test_the_digest_follows_content_and_order_only(tmp_path: Path) -> None:
    one = _load(_series(tmp_path / "a", {"0001-gate.patch": GATE_PATCH}))
    same = _load(_series(tmp_path / "b", {"0001-gate.patch": GATE_PATCH}))
    changed = _load(_series(tmp_path / "c", {"0001-gate.patch": GATE_PATCH + " \n"}))
    assert one.digest == same.digest != changed.digest
    assert cached_dir(one) == cached_dir(same) != cached_dir(changed)


@pytest.mark.parametrize(
    ("files", "release", "says"),
    [
        ({}, "v1.36.3", "has no patches"),
        ({"0001-x.patch": "just some words\n"}, "v1.36.3", "not a unified diff"),
        ({"notes.txt": "hello\n"}, "v1.36.3", "notes.txt is not a patch"),
        ({"0001-gate.patch": GATE_PATCH}, "v1.35.4", "made for v1.35.4, not v1.36.3"),
        (
            {"0001-gate.patch": GATE_PATCH, "0002-again.patch": GATE_PATCH},
            "v1.36.3",
            "KubeletParallelThing is registered by both 0001-gate.patch and 0002-again.patch",
        ),
        (
            {"0001-x.patch": WORKERS_PATCH.replace("b/pkg/kubelet", "b/../../etc")},
            "v1.36.3",
            "outside the source tree",
        ),
    ],
)
def test_bad_series_folders_are_refused_whole(
    tmp_path: Path, files: dict[str, str], release: str, says: str
) -> None:
    folder = _series(tmp_path, files, release)
    with pytest.raises(UserError, match=says):
        _load(folder)


def test_a_folder_without_series_yaml_is_refused(tmp_path: Path) -> None:
    (tmp_path / "my-series").mkdir()
    with pytest.raises(UserError, match=r"no series\.yaml in"):
        _load(tmp_path / "my-series")


def test_patches_apply_in_order_to_a_copy(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABTEST_CACHE", str(tmp_path / "cache"))
    series = _load(
        _series(tmp_path, {"0001-gate.patch": GATE_PATCH, "0002-w.patch": WORKERS_PATCH})
    )
    tree = patched_tree(series, source)
    assert "KubeletParallelThing" in (tree / "pkg/features/kube_features.go").read_text()
    assert "return 5" in (tree / "pkg/kubelet/status/status.go").read_text()
    assert (source / "pkg/kubelet/status/status.go").read_text() == STATUS  # the copy only
    # a second build starts from a fresh copy: the patches apply again
    assert "return 5" in (patched_tree(series, source) / "pkg/kubelet/status/status.go").read_text()


def test_a_patch_that_does_not_apply_names_its_file_and_first_failing_hunk(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABTEST_CACHE", str(tmp_path / "cache"))
    stale = WORKERS_PATCH.replace("-\treturn 1", "-\treturn 7")
    series = _load(_series(tmp_path, {"0001-gate.patch": GATE_PATCH, "0002-w.patch": stale}))
    with pytest.raises(UserError) as err:
        patched_tree(series, source)
    line = str(err.value)
    assert "0002-w.patch" in line and "does not apply to k8s.io/kubernetes v1.36.3" in line
    assert "pkg/kubelet/status/status.go line 1" in line and "\n" not in line


def test_a_gate_the_release_already_has_is_a_clash(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABTEST_CACHE", str(tmp_path / "cache"))
    clash = GATE_PATCH.replace("KubeletParallelThing", "KubeletTracing")
    series = _load(_series(tmp_path, {"0001-gate.patch": clash}))
    with pytest.raises(UserError, match=r"registers feature gate KubeletTracing, which v1\.36\.3"):
        patched_tree(series, source)


def test_the_shipped_agc_series_is_whole() -> None:
    series = load_series(parse_build_name("v1.36.3+agc", "BUILD"))
    assert series.release == Release(1, 36, 3)
    assert sorted(series.gates) == sorted(
        [
            "KubeletParallelPodStatusSync",
            "KubeletPodStatusRetry",
            "KubeletQOSCgroupUpdateCoalescing",
            "KubeletSystemdCgroupCreateWithResources",
            "KubeletCgroupControllerReuse",
        ]
    )


def test_a_prefix_is_a_build_of_its_first_patches_with_its_own_digest(tmp_path: Path) -> None:
    folder = _series(tmp_path, {"0001-gate.patch": GATE_PATCH, "0002-workers.patch": WORKERS_PATCH})
    whole = _load(folder)
    build = parse_build_name(f"v1.36.3+{folder}", "BUILD")
    prefixes = series_prefixes(build)
    assert [p.name for p in prefixes] == ["v1.36.3", "v1.36.3+my-series.p1", "v1.36.3+my-series"]
    first = load_series(prefixes[1])
    assert first.name == "my-series.p1" and [p.file for p in first.patches] == ["0001-gate.patch"]
    assert first.digest != whole.digest
    assert cached_dir(first) != cached_dir(whole)
    # a placed prefix's name is whole: semver build metadata the node reports as it is
    placed = parse_build_name("v1.36.3+bisect-demo.p2", "BUILD", paths=False)
    assert (placed.series, placed.prefix, placed.name) == (
        "bisect-demo",
        2,
        "v1.36.3+bisect-demo.p2",
    )
    assert build_version_of("Kubernetes v1.36.3+bisect-demo.p2") == "v1.36.3+bisect-demo.p2"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("v1.36.3+bisect-demo.p4", "has 4 patches: v1.36.3\\+bisect-demo.p4 is no prefix"),
        ("v1.36.3+bisect-demo.p9", "no prefix of it"),
    ],
)
def test_a_prefix_past_the_series_is_refused(text: str, says: str) -> None:
    with pytest.raises(UserError, match=says):
        load_series(parse_build_name(text, "BUILD"))


def test_a_series_folder_named_like_a_prefix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"may not end in \.pN"):
        parse_build_name(f"v1.36.3+{tmp_path / 'x.p2'}", "BUILD")


def test_the_shipped_bisect_demo_series_has_its_culprit_third() -> None:
    series = load_series(parse_build_name("v1.36.3+bisect-demo", "BUILD"))
    assert len(series.patches) == 4 and not series.gates
    culprit = (series.folder / series.patches[2].file).read_text()
    assert "time.Sleep(bisectDemoFirstSyncDelay)" in culprit
    for harmless in (series.patches[0], series.patches[1], series.patches[3]):
        assert "Sleep" not in (series.folder / harmless.file).read_text()
