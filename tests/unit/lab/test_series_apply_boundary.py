"""The builder's apply step (``patched_tree``, what the lab's build calls; no Go build here)
writes nothing outside its work tree, whatever a series holds.

Each crafted series (tests/crafted_series.py) is handed to the apply step as a loaded series
would be, but without the load's check (a ``PatchSeries`` made by hand): the step must check
it again itself. Then the same patches go straight to ``git_apply`` (git with the builder's
options, no check at all): git's own safety must hold too. Both times everything outside the
work tree (the sentinel ``etc/`` beside the cache, the source, the series) is byte-identical
afterwards. The source is a small git repository in tmp_path, shaped like k8s.io/kubernetes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from crafted_series import CRAFTED, GOOD, SECRET, SOURCE, Crafted

from abtest.config.domain import Release
from abtest.config.kubelet_series import PatchSeries
from abtest.config.series_patches import Patch
from abtest.errors import UserError
from abtest.lab.patched_kubelets import git_apply, patched_tree

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
WORK_TREE = "abtest/build/src-v1.36.3+evil"  # under $ABTEST_CACHE


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the cache ($ABTEST_CACHE), with the sentinel ``etc/`` beside the
    builder's work tree (``../../../etc/passwd`` from it) and a user's git config that would
    run a command on every file git writes."""
    monkeypatch.setenv("ABTEST_CACHE", str(tmp_path))
    (tmp_path / WORK_TREE).parent.mkdir(parents=True)  # the cache's build folder is the step's
    (tmp_path / "etc" / "cron.d").mkdir(parents=True)
    (tmp_path / "etc" / "passwd").write_text(SECRET)
    (tmp_path / "etc" / "cron.d" / "keep").write_text("# nothing\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "attributes").write_text("* filter=witness\n")
    (home / ".gitconfig").write_text(
        f"[core]\n\tattributesFile = {home / 'attributes'}\n"
        f'[filter "witness"]\n\tsmudge = touch {tmp_path / "FILTER-RAN"} && cat\n'
    )
    monkeypatch.setenv("HOME", str(home))
    for name in ("GIT_CONFIG_GLOBAL", "XDG_CONFIG_HOME", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _source(world: Path, links: dict[str, str]) -> Path:
    src = world / "k8s-src"
    for name, text in SOURCE.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    for name, target in links.items():
        (src / name).symlink_to(target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(world)}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "upstream"]):
        subprocess.run([*git, *argv], cwd=src, env=env, check=True, capture_output=True)
    return src


def _series(world: Path, patches: dict[str, str]) -> PatchSeries:
    """The series as a load would hand it over, but unchecked."""
    folder = world / "evil"
    folder.mkdir()
    (folder / "series.yaml").write_text("release: v1.36.3\n")
    for name, text in patches.items():
        (folder / name).write_text(text)
    loaded = tuple(
        Patch(name, hashlib.sha256(text.encode()).hexdigest(), (), ())
        for name, text in sorted(patches.items())
    )
    return PatchSeries("evil", folder, Release(1, 36, 3), loaded)


def _outside(world: Path) -> dict[str, tuple[str, bytes]]:
    """Every path under the world but the work tree: its type and mode, and its bytes (or a
    link's target)."""
    seen: dict[str, tuple[str, bytes]] = {}
    for root, dirs, files in os.walk(world):
        rel = Path(root).relative_to(world)
        dirs[:] = [d for d in dirs if (rel / d).as_posix() != WORK_TREE]
        for name in [*dirs, *files]:
            path = Path(root) / name
            st = path.lstat()
            if path.is_symlink():
                seen[str(rel / name)] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                seen[str(rel / name)] = (f"dir {st.st_mode:o}", b"")
            else:
                seen[str(rel / name)] = (f"file {st.st_mode:o}", path.read_bytes())
    return seen


def _tree_holds_secret(world: Path) -> bool:
    tree = world / WORK_TREE
    return any(
        p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes()
        for p in tree.rglob("*")
    )


@pytest.mark.parametrize("case", CRAFTED, ids=[c.id for c in CRAFTED])
def test_the_apply_step_refuses_a_crafted_series_and_writes_nothing_outside(
    case: Crafted, world: Path
) -> None:
    source = _source(world, case.links)
    series = _series(world, case.patches)
    before = _outside(world)
    with pytest.raises(UserError) as err:
        patched_tree(series, source)
    line = str(err.value)
    assert "\n" not in line and f"{case.patch} line {case.line}: " in line, line
    for word in case.words:
        assert word in line, f"{word!r} not in {line}"
    assert _outside(world) == before
    assert not _tree_holds_secret(world)
    assert not (world / WORK_TREE / ".git" / "hooks" / "post-checkout").exists()
    assert not (world / "FILTER-RAN").exists()


@pytest.mark.parametrize("case", CRAFTED, ids=[c.id for c in CRAFTED])
def test_git_apply_unchecked_writes_nothing_outside_the_work_tree(
    case: Crafted, world: Path
) -> None:
    source = _source(world, case.links)
    series = _series(world, case.patches)
    tree = world / WORK_TREE
    shutil.copytree(source, tree, symlinks=True)
    before = _outside(world)
    for name, text in sorted(case.patches.items()):
        try:
            git_apply(text, tree, series.folder / name, series)
        except UserError as exc:
            assert "does not apply to k8s.io/kubernetes v1.36.3" in str(exc)
    assert _outside(world) == before
    assert not (tree / ".git" / "hooks" / "post-checkout").exists()
    assert not (world / "FILTER-RAN").exists()
    # git 2.39 does copy a "copy from" source outside the tree into it (its own path check
    # skips a copy's source): only the series check stands between a series and that read
    if case.id != "copy-from-outside":
        assert not _tree_holds_secret(world)


def test_a_good_series_applies_without_the_users_git_config(world: Path) -> None:
    source = _source(world, {})
    series = _series(world, {"0001-workers.patch": GOOD})
    tree = patched_tree(series, source)
    assert "return 5" in (tree / "pkg/kubelet/status/status.go").read_text()
    assert not (world / "FILTER-RAN").exists()
    # the control: git run plainly (as before) reads that config and runs the filter
    (tree / "pkg/kubelet/status/status.go").write_text(SOURCE["pkg/kubelet/status/status.go"])
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    subprocess.run(["git", "apply", "-"], input=GOOD.encode(), cwd=tree, env=env, check=True)
    assert (world / "FILTER-RAN").exists()


def test_a_patch_changed_after_the_load_is_refused_not_applied(world: Path) -> None:
    source = _source(world, {})
    series = _series(world, {"0001-workers.patch": GOOD})
    (series.folder / "0001-workers.patch").write_text(GOOD.replace("return 5", "return 6"))
    with pytest.raises(UserError, match=r"0001-workers\.patch changed while the build"):
        patched_tree(series, source)
