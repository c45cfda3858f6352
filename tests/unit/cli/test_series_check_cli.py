"""The patch-series check refuses every crafted series (tests/crafted_series.py) through the
real CLI: ``abtest bisect --good v1.36.3 --bad v1.36.3+./evil`` loads the series (its prefixes
are the range) before anything is built or a node reached, so a refusal is one line naming
the series, the patch file and the line, exit 2, and no node, build or database."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input import invoke
from crafted_series import CRAFTED, GOOD, Crafted

import abtest.engine.sweep

CHECKED = [c for c in CRAFTED if not c.links]  # a symlink in the source is the builder's to see


def _refused(
    tmp_path: Path, patches: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> list[str]:
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "series.yaml").write_text("release: v1.36.3\n")
    for name, text in patches.items():
        (folder / name).write_text(text)
    done = invoke(["bisect", "--good", "v1.36.3", "--bad", "v1.36.3+./evil"], tmp_path, capsys)
    assert "Traceback" not in done.out + done.err
    assert done.code == 2, done.out + done.err
    assert not (tmp_path / "abtest.db").exists()
    return done.err.strip().splitlines()


@pytest.mark.parametrize("case", CHECKED, ids=[c.id for c in CHECKED])
def test_a_crafted_series_is_refused_in_one_line_naming_patch_and_line(
    case: Crafted,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_node() -> None:
        raise AssertionError("a node was reached")

    monkeypatch.setattr(abtest.engine.sweep, "RealNodes", no_node)
    lines = _refused(tmp_path, case.patches, capsys)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("abtest: error: "), line
    assert f"{tmp_path / 'evil' / case.patch} line {case.line}: series evil: " in line, line
    for word in case.words:
        assert word in line, f"{word!r} not in {line}"


def test_the_crafted_classes_are_all_there() -> None:
    kinds = {c.kind for c in CRAFTED}
    assert kinds >= {"rename", "quoted", "dotgit", "symlink", "absolute", "gate", "copy"}


def test_a_good_patch_of_the_same_shape_passes_the_check(tmp_path: Path) -> None:
    from abtest.config.kubelet_series import load_series, parse_build_name

    folder = tmp_path / "good"
    folder.mkdir()
    (folder / "series.yaml").write_text("release: v1.36.3\n")
    (folder / "0001-workers.patch").write_text(GOOD)
    series = load_series(parse_build_name(f"v1.36.3+{folder}", "BUILD"))
    assert series.patches[0].files == ("pkg/kubelet/status/status.go",)
