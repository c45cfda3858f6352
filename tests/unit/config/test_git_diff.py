"""The diff reader reads headers as ``git apply -p1`` does: quoted names, renames, copies, modes,
hunks by their counts, headers between patches; and refuses where git's reading is a guess.
Where git can say what it read (``git apply --numstat``, which applies and checks nothing),
the two readings are compared."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from crafted_series import CRAFTED, GOOD, PREAMBLE

from abtest.config.git_diff import DiffError, Name, read_diff
from abtest.config.kubelet_series import series_root

SHIPPED = sorted(series_root().glob("*/*.patch"))
RENAME_WITH_SPACES = (
    "diff --git a/pkg/old name.go b/pkg/new name.go\nsimilarity index 90%\n"
    "rename from pkg/old name.go\nrename to pkg/new name.go\n"
    "--- a/pkg/old name.go\n+++ b/pkg/new name.go\n@@ -1 +1 @@\n-a\n+b\n"
)
QUOTED = (
    'diff --git "a/pkg/\\303\\251t\\303\\251 \\"q\\".go" "b/pkg/\\303\\251t\\303\\251 \\"q\\".go"\n'
    "new file mode 100644\nindex 0000000..e69de29\n"
)
# a removed line "-- a/x" and an added "++ b/x" are content: the counts say so
CONTENT_LIKE_HEADERS = (
    "diff --git a/pkg/x b/pkg/x\n--- a/pkg/x\n+++ b/pkg/x\n@@ -1,2 +1,2 @@\n"
    "--- a/pkg/y\n+++ b/pkg/y\n ctx\n"
)
PLAIN = "--- a/pkg/x\t2024-05-01 10:00:00.000000000 +0200\n+++ b/pkg/x\t2024-05-01\n"
PLAIN_DATED = (
    "--- a/pkg/x\t2024-05-01 10:00:00.000000000 +0200\n"
    "+++ b/pkg/x\t2024-05-01 10:00:01.000000000 +0200\n@@ -1 +1 @@\n-a\n+b\n"
)
MIXED = (
    'diff --git a/pkg/a b.go "b/pkg/a b.go"\n--- a/pkg/a b.go\n+++ "b/pkg/a b.go"\n'
    "@@ -1,3 +1,3 @@\n x\n\n-a\n+b\n\\ No newline at end of file\n"
    "diff --git a/pkg/o b/pkg/n\nrename old pkg/o\nrename new pkg/n\n"
    "diff --git a/pkg/m b/pkg/m\nold mode 100644\nnew mode 100755\n"
)
# git writes to the shorter name when the other only adds to it
PLAIN_ORIG = "--- a/pkg/x\n+++ b/pkg/x.orig\n@@ -1 +1 @@\n-a\n+b\n"
DELETE_AND_COPY = (
    "diff --git a/pkg/x b/pkg/x\ndeleted file mode 100644\nindex 1111111..0000000\n"
    "--- a/pkg/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
    "diff --git a/pkg/c b/pkg/d\nsimilarity index 80%\ncopy from pkg/c\ncopy to pkg/d\n"
    "--- a/pkg/c\n+++ b/pkg/d\n@@ -1 +1 @@\n-a\n+b\n"
)
CORPUS = {
    "mixed": MIXED,
    "delete-and-copy": DELETE_AND_COPY,
    "plain-orig": PLAIN_ORIG,
    "good": GOOD,
    "mail": PREAMBLE + GOOD + "-- \n2.43.0\n",
    "rename-with-spaces": RENAME_WITH_SPACES,
    "quoted": QUOTED,
    "content-like-headers": CONTENT_LIKE_HEADERS,
    "plain-dated": PLAIN_DATED,
    "header-after-counted-lines": GOOD + " not counted\n" + GOOD.replace("status.go", "s2.go"),
    **{f"shipped-{p.parent.name}-{p.name[:4]}": p.read_text() for p in SHIPPED},
    **{f"crafted-{c.id}": t for c in CRAFTED for t in c.patches.values()},
}


def _names(text: str) -> list[str]:
    return [str(c.new or c.old) for c in read_diff(text)]


def _git_numstat(text: str, cwd: Path) -> list[str] | None:
    done = subprocess.run(
        ["git", "apply", "-p1", "--numstat", "-z", "-"],
        input=text.encode(),
        cwd=cwd,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        return None  # git does not read it either
    return [rec.split(b"\t", 2)[2].decode() for rec in done.stdout.split(b"\0") if rec]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_reader_names_the_files_git_names(name: str, tmp_path: Path) -> None:
    text = CORPUS[name]
    git = _git_numstat(text, tmp_path)
    try:
        ours = _names(text)
    except DiffError:
        return  # refused as a guess; the crafted-series tests say which and why
    assert git is not None, f"read {ours}, git reads nothing"
    # the one difference on purpose: git reads "/etc/passwd" as "etc/passwd" (-p1 takes the
    # empty first component); the reader keeps it whole, so the check refuses what was meant
    assert len(ours) == len(git) and all(o in (g, "/" + g) for o, g in zip(ours, git, strict=True))


def test_quoted_names_decode_octal_and_backslash_escapes() -> None:
    (change,) = read_diff(QUOTED)
    assert (change.kind, change.new) == ("create", 'pkg/été "q".go')
    plus = '+++ "b/pkg/..\\057..\\057etc/passwd"'
    seen: list[Name] = []
    with pytest.raises(DiffError, match="no rename or copy"):
        read_diff(GOOD.replace("+++ b/pkg/kubelet/status/status.go", plus), seen.append)
    assert (seen[-1].line, seen[-1].header, seen[-1].path) == (3, "+++", "pkg/../../etc/passwd")


def test_renames_and_copies_name_both_files_whole() -> None:
    (rename,) = read_diff(RENAME_WITH_SPACES)
    assert (rename.kind, rename.old, rename.new) == ("rename", "pkg/old name.go", "pkg/new name.go")
    assert [(n.header, n.path) for n in rename.names][:2] == [
        ("rename from", "pkg/old name.go"),
        ("rename to", "pkg/new name.go"),
    ]
    copy = RENAME_WITH_SPACES.replace("rename ", "copy ")
    assert read_diff(copy)[0].kind == "copy"


def test_modes_and_their_lines_are_read() -> None:
    link = (
        "diff --git a/pkg/l b/pkg/l\nnew file mode 120000\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/pkg/l\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
    )
    (change,) = read_diff(link)
    assert change.modes == ((2, 0o120000),) and change.kind == "create"
    index_mode = GOOD.replace("--- a/", "index 1111111..2222222 100755\n--- a/", 1)
    assert read_diff(index_mode)[0].modes == ((2, 0o100755),)


def test_hunks_are_read_by_their_counts() -> None:
    (change,) = read_diff(CONTENT_LIKE_HEADERS)
    assert change.new == "pkg/x"
    assert change.added == ((6, "++ b/pkg/y"),)
    two = read_diff(GOOD + " not counted\n" + GOOD.replace("status.go", "s2.go"))
    assert [c.new for c in two] == ["pkg/kubelet/status/status.go", "pkg/kubelet/status/s2.go"]
    assert read_diff(PREAMBLE + GOOD)[0].line == 9


def test_every_name_is_shown_to_the_check_as_it_is_read() -> None:
    seen: list[tuple[int, str, str]] = []
    read_diff(RENAME_WITH_SPACES, lambda n: seen.append((n.line, n.header, n.path)))
    assert seen == [
        (3, "rename from", "pkg/old name.go"),
        (4, "rename to", "pkg/new name.go"),
        (5, "---", "pkg/old name.go"),
        (6, "+++", "pkg/new name.go"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ('diff --git a/x b/x\n--- a/x\n+++ "b/x\n@@ -1 +1 @@\n-a\n+b\n', 3, "closing quote"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\r\n@@ -1 +1 @@\n-a\n+b\n", 3, "control character"),
        ("--- a/my x\n+++ b/my x\n@@ -1 +1 @@\n-a\n+b\n", 1, "a name with a space"),
        (PLAIN + "@@ -1 +1 @@\n-a\n+b\n", 2, "is not a timestamp"),
        ("diff --git a/x b/x\nindex 1..2\nGIT binary patch\nliteral 1\n", 3, "binary patch"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n", 4, "ends inside"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n a\n", 4, "changes nothing"),
        ("some words\n@@ -1 +1 @@\n-a\n+b\n", 2, "a hunk outside any file"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", 1, "no rename or copy"),
        ("diff --git a/x b/z\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", 1, "does not name"),
        ("diff --git a/x b/x\n+++ b/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", 3, "its header 'x'"),
        ("diff --git a/x b/y\nrename from x\ncopy to y\n", 3, "two of new, deleted"),
        ("diff --git a/x b/x\nnew file mode 100644\n--- a/x\n", 3, "/dev/null only"),
        ("diff --git a/x b/x\nold mode 100644\nnew mode 10x644\n", 3, "not a file mode"),
        ("diff --git a/x b/x\nindex 1..2 100644\n", 1, "changes nothing"),
        ("diff --git a/x b/x\nsome text\n", 1, "without header lines"),
    ],
)
def test_what_git_would_guess_at_is_refused_at_its_line(text: str, line: int, says: str) -> None:
    with pytest.raises(DiffError) as err:
        read_diff(text)
    assert err.value.line == line and says in err.value.what, str(err.value)


def test_the_shipped_series_read_as_the_old_file_lists_did() -> None:
    for path in SHIPPED:
        text = path.read_text()
        old = re.findall(r"^\+\+\+ (?:b/)?(\S+)", text, re.M)
        assert [c.new for c in read_diff(text)] == [f for f in old if f != "/dev/null"], path
