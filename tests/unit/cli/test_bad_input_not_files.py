"""Files that are not files, through the real CLI: every input a user names by path (``--db``,
``ABTEST_DB``, ``KUBECONFIG``, ``--kubeconfig``, profiles, playbooks, catalogs, rounds CSVs,
export files, a patch series' series.yaml) refused with one line naming what is there when it
is a FIFO, a socket, a character device or a folder; nothing blocks on it (a FIFO given as
``--db`` or ``KUBECONFIG`` used to hang the command with no output). A path that does not exist
yet is still fine where the command creates it (a new SQLite database), and a link to a regular
file is that file."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bad_input import CATALOG, PLAYBOOK, PROFILE, Case, invoke, run_case

from abtest.config import paths
from abtest.errors import UserError


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    # bound by a relative name: a pytest tmp path can be longer than a socket address allows
    old = Path.cwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)
    finally:
        os.chdir(old)


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")  # a read that never ends; the link is followed, as a user's is


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "x.yaml").write_text("x: 1\n")


KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (_fifo, "is a fifo"),
    "socket": (_socket, "is a socket"),
    "device": (_device, "is a character device"),
    "folder": (_folder, "is a directory"),
}


@dataclass(frozen=True)
class Input:
    """One input named by path: the command line (``{p}``: the path, ``{tmp}``: the folder),
    where the thing that is not a file is put, the files beside it and the environment."""

    id: str
    args: tuple[str, ...]
    at: str = "x"
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


SERIES_PATCH = """\
--- a/pkg/kubelet/kubelet.go
+++ b/pkg/kubelet/kubelet.go
@@ -1,1 +1,1 @@
-a
+b
"""

INPUTS = [
    Input("db", ("runs", "--db", "{p}")),
    Input("db-report", ("report", "r1", "--db", "{p}")),
    Input("db-export", ("runs", "export", "-o", "{tmp}/out.json", "--db", "{p}")),
    Input("abtest-db-env", ("runs",), env={"ABTEST_DB": "{p}"}),
    Input(
        "kubeconfig-env",
        ("regress", "--profile", "{tmp}/n.yaml", "--context", "c"),
        files={"n.yaml": PROFILE},
        env={"KUBECONFIG": "{p}"},
    ),
    Input(
        "kubeconfig-flag",
        ("regress", "--profile", "{tmp}/n.yaml", "--kubeconfig", "{p}"),
        files={"n.yaml": PROFILE},
    ),
    Input("profile", ("plan", "--playbook", "lab-sweep", "--profile", "{p}")),
    Input(
        "playbook-profile",
        ("plan", "--playbook", "{tmp}/pb.yaml"),
        files={"pb.yaml": PLAYBOOK + "profile: {p}\n"},
    ),
    Input("playbook", ("plan", "--playbook", "{p}", "--profile", "lab")),
    Input("catalog", ("gates", "--list", "--catalog", "{p}")),
    Input(
        "playbook-catalog",
        ("plan", "--playbook", "{tmp}/pb.yaml", "--profile", "lab"),
        files={"pb.yaml": PLAYBOOK.replace("catalog: lab", "catalog: {p}")},
    ),
    Input("analyze-csv", ("analyze", "{p}")),
    Input("regress-csv", ("regress", "--csv", "{p}", "--reference", "a", "--candidate", "b")),
    Input("runs-import", ("runs", "import", "{p}", "--db", "{tmp}/r.sqlite")),
    Input(
        "series-file",
        ("bisect", "--good", "v1.36.3", "--bad", "v1.36.3+{tmp}/ser", "--profile", "lab"),
        at="ser/series.yaml",
        files={"ser/0001-a.patch": SERIES_PATCH, "ser/0002-b.patch": SERIES_PATCH},
    ),
]


def _fill(text: str, tmp: Path, path: Path) -> str:
    return text.replace("{p}", str(path)).replace("{tmp}", str(tmp))


@pytest.mark.timeout(60)  # a FIFO that is opened blocks: the timeout is the hang's witness
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("given", INPUTS, ids=[i.id for i in INPUTS])
def test_an_input_that_is_not_a_regular_file_is_refused_in_one_line(
    given: Input,
    kind: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make, words = KINDS[kind]
    path = tmp_path / given.at
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)
    for name, text in given.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(_fill(text, tmp_path, path))
    for name, value in given.env.items():
        monkeypatch.setenv(name, _fill(value, tmp_path, path))
    args = tuple(_fill(a, tmp_path, path) for a in given.args)
    run_case(Case(given.id, args, (words, "not a regular file")), tmp_path, capsys)
    if kind == "folder":
        assert sorted(p.name for p in path.iterdir()) == ["x.yaml"]  # nothing made in it
    else:
        assert not stat.S_ISREG(os.stat(path).st_mode)  # not replaced by a file either


def test_a_database_path_that_does_not_exist_yet_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "e.json"
    first = invoke(["runs", "export", "-o", str(export), "--db", str(tmp_path / "a.sqlite")],
                   tmp_path, capsys)  # fmt: skip
    assert first.code == 0, first.err
    new = tmp_path / "new.sqlite"
    done = invoke(["runs", "import", str(export), "--db", str(new)], tmp_path, capsys)
    assert done.code == 0, done.err
    assert new.read_bytes().startswith(b"SQLite format 3\x00")


def test_a_link_to_a_regular_file_is_that_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "real.yaml").write_text(CATALOG)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "real.yaml")
    done = invoke(["gates", "--list", "--catalog", str(tmp_path / "link.yaml")], tmp_path, capsys)
    assert done.code == 0, done.err
    assert "kubeAPIQPS" in done.out


def test_a_folder_named_like_a_shipped_catalog_does_not_hide_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bare name is a shipped one unless a *file* of that name is there: the lab playbooks'
    `catalog: lab` keeps working from a folder that holds a `lab/` folder."""
    (tmp_path / "lab").mkdir()
    done = invoke(["gates", "--list", "--catalog", "lab"], tmp_path, capsys)
    assert done.code == 0, done.err
    assert "kubeAPIQPS" in done.out


@pytest.mark.timeout(30)
def test_a_fifo_put_in_place_after_the_check_is_refused_on_the_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the open and the open are two steps; the descriptor is opened without
    blocking and checked itself, so a FIFO swapped in between is refused, not waited on."""
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    monkeypatch.setattr(paths, "input_problem", lambda _path: None)
    with pytest.raises(UserError, match="is a FIFO, not a regular file"):
        paths.read_input(fifo, str(fifo), "give a file", 1000)
    with pytest.raises(UserError, match="is a FIFO, not a regular file"):
        paths.check_db_path(fifo, "--db")
