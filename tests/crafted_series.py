"""Crafted kubelet patch series, one attack each, shared by the series check's tests (through
the CLI, tests/unit/cli/test_series_check_cli.py) and the builder's apply step's
(tests/unit/lab/test_series_apply_boundary.py).

Every patch is one git itself would parse: the point is what git would do with it unchecked.
The tree they are aimed at is shaped like k8s.io/kubernetes (``SOURCE``); the builder's work tree
is ``$ABTEST_CACHE/abtest/build/src-v1.36.3+evil``, so ``../../../`` from it is
``$ABTEST_CACHE``, where the apply tests keep the sentinel ``etc/passwd``; from ``pkg/`` in the
tree it is ``../../../../``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FEATURES = """package features

const (
	// KubeletTracing is upstream's.
	KubeletTracing featuregate.Feature = "KubeletTracing"
)
"""
STATUS = "package status\n\nfunc workers() int {\n\treturn 1\n}\n"
SOURCE = {"pkg/features/kube_features.go": FEATURES, "pkg/kubelet/status/status.go": STATUS}
SECRET = "root:x:0:0:the sentinel:/root:/bin/sh\n"

STATUS_DIFF = """\
--- a/pkg/kubelet/status/status.go
+++ b/pkg/kubelet/status/status.go
@@ -3,3 +3,3 @@
 func workers() int {
-\treturn 1
+\treturn 5
 }
"""
GOOD = "diff --git a/pkg/kubelet/status/status.go b/pkg/kubelet/status/status.go\n" + STATUS_DIFF
PREAMBLE = """\
From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001
From: A Contributor <a@example.com>
Subject: [PATCH] kubelet: five status workers

---
 pkg/kubelet/status/status.go | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

"""


@dataclass(frozen=True)
class Crafted:
    """A series folder ``evil`` (release v1.36.3) holding ``patches``; the check must refuse it
    with one line naming ``patch`` at ``line`` and saying ``words``."""

    id: str
    kind: str  # the attack's class, as the issue lists them
    patches: dict[str, str]
    patch: str
    line: int
    words: tuple[str, ...]
    #: source files (relative to the tree) that are symlinks: name -> target
    links: dict[str, str] = field(default_factory=dict)


def _rename(old: str, new: str, verb: str = "rename") -> str:
    return (
        f"diff --git a/{old} b/{new}\nsimilarity index 100%\n{verb} from {old}\n{verb} to {new}\n"
    )


def _create(path: str, body: str, mode: str = "100644", header: str | None = None) -> str:
    lines = body.splitlines()
    added = "".join(f"+{line}\n" for line in lines)
    name = header or f"a/{path} b/{path}"
    plus = header.split(" ")[1] if header else f"b/{path}"
    return (
        f"diff --git {name}\nnew file mode {mode}\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ {plus}\n@@ -0,0 +1,{len(lines)} @@\n{added}"
    )


def _modify(path: str, old: str, new: str, plus: str | None = None) -> str:
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ {plus or 'b/' + path}\n"
        f"@@ -1 +1 @@\n-{old}\n+{new}\n"
    )


PASSWD = "../../../etc/passwd"  # from the work tree: the sentinel
UP4 = r"pkg/..\057..\057..\057..\057etc/passwd"  # quoted: pkg/../../../../etc/passwd
GATE_TWICE = """\
diff --git a/pkg/features/kube_features.go b/pkg/features/kube_features.go
--- a/pkg/features/kube_features.go
+++ b/pkg/features/kube_features.go
@@ -4,3 +4,7 @@ const (
 \t// KubeletTracing is upstream's.
 \tKubeletTracing featuregate.Feature = "KubeletTracing"
+
+\tKubeletTwice featuregate.Feature = "KubeletTwice"
+
+\tKubeletTwice featuregate.Feature = "KubeletTwice"
 )
"""
OUTSIDE = ("outside the source tree",)
MORE_GATES = 'package features\n\nconst (\n\tKubeletTwice featuregate.Feature = "KubeletTwice"\n)'

CRAFTED = [
    # --- rename from/to outside the tree
    Crafted(
        "rename-from-outside",
        "rename",
        {"0001-x.patch": _rename(PASSWD, "pkg/passwd")},
        "0001-x.patch",
        3,
        ("rename from '../../../etc/passwd'", *OUTSIDE, "'..' component"),
    ),
    Crafted(
        "rename-to-outside",
        "rename",
        {"0001-x.patch": _rename("pkg/kubelet/status/status.go", PASSWD)},
        "0001-x.patch",
        4,
        ("rename to '../../../etc/passwd'", *OUTSIDE),
    ),
    Crafted(
        "rename-after-a-good-patch-in-a-mail",
        "rename",
        {"0001-x.patch": PREAMBLE + GOOD + _rename(PASSWD, "pkg/passwd") + "-- \n2.43.0\n"},
        "0001-x.patch",
        19,
        ("rename from '../../../etc/passwd'", *OUTSIDE),
    ),
    # --- quoted names with octal and backslash escapes
    Crafted(
        "quoted-octal-plus",
        "quoted",
        {"0001-x.patch": _modify("pkg/kubelet/status/status.go", "a", "b", f'"b/{UP4}"')},
        "0001-x.patch",
        3,
        ("+++ 'pkg/../../../../etc/passwd'", *OUTSIDE),
    ),
    Crafted(
        "quoted-octal-modify-both",
        "quoted",
        {
            "0001-x.patch": f'diff --git "a/{UP4}" "b/{UP4}"\n--- "a/{UP4}"\n+++ "b/{UP4}"\n'
            f"@@ -1 +1 @@\n-{SECRET}+pwned\n"
        },
        "0001-x.patch",
        1,
        ("diff --git 'pkg/../../../../etc/passwd'", *OUTSIDE),
    ),
    Crafted(
        "quoted-dots-escaped-empty-file",
        "quoted",
        {
            "0001-x.patch": r'diff --git "a/pkg/\056\056/\056\056/x" "b/pkg/\056\056/\056\056/x"'
            "\nnew file mode 100644\nindex 0000000..e69de29\n"
        },
        "0001-x.patch",
        1,
        ("'pkg/../../x'", *OUTSIDE),
    ),
    # --- .git (hooks run code)
    Crafted(
        "git-hook",
        "dotgit",
        {
            "0001-x.patch": _create(
                ".git/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/pwned", "100755"
            )
        },
        "0001-x.patch",
        1,
        ("'.git/hooks/post-checkout'", "under .git"),
    ),
    Crafted(
        "git-hook-upper-case-after-a-hunk",
        "dotgit",
        {"0001-x.patch": GOOD + _create("pkg/.GIT/hooks/pre-commit", "#!/bin/sh", "100755")},
        "0001-x.patch",
        9,
        ("'pkg/.GIT/hooks/pre-commit'", "under .git"),
    ),
    Crafted(
        "gitattributes",
        "dotgit",
        {"0001-x.patch": _create(".gitattributes", "* filter=lfs")},
        "0001-x.patch",
        1,
        ("'.gitattributes'", "git control file"),
    ),
    # --- a symlink, then a write through it
    Crafted(
        "symlink-then-write-through",
        "symlink",
        {
            "0001-link.patch": _create("pkg/evil", "../../../../etc", "120000"),
            "0002-write.patch": _modify("pkg/evil/passwd", SECRET.strip(), "pwned"),
        },
        "0001-link.patch",
        2,
        ("mode 120000 (a symlink) for 'pkg/evil'",),
    ),
    Crafted(
        "file-turned-symlink",
        "symlink",
        {
            "0001-link.patch": "diff --git a/pkg/kubelet/status/status.go "
            "b/pkg/kubelet/status/status.go\nold mode 100644\nnew mode 120000\n",
        },
        "0001-link.patch",
        3,
        ("mode 120000 (a symlink)",),
    ),
    Crafted(
        "submodule",
        "symlink",
        {"0001-sub.patch": _create("pkg/sub", "Subproject commit " + "1" * 40, "160000")},
        "0001-sub.patch",
        2,
        ("mode 160000 (a submodule)",),
    ),
    Crafted(
        "write-through-a-symlink-in-the-source",
        "symlink-in-tree",
        {"0001-write.patch": _modify("pkg/evil/passwd", SECRET.strip(), "pwned")},
        "0001-write.patch",
        1,
        ("'pkg/evil/passwd' passes through the symlink 'pkg/evil'",),
        links={"pkg/evil": "../../../../etc"},
    ),
    # --- absolute paths
    Crafted(
        "absolute-plus",
        "absolute",
        {"0001-x.patch": _modify("pkg/kubelet/status/status.go", "a", "b", "/etc/passwd")},
        "0001-x.patch",
        3,
        ("+++ '/etc/passwd'", *OUTSIDE, "absolute path"),
    ),
    Crafted(
        "absolute-double-slash",
        "absolute",
        {
            "0001-x.patch": _create(
                "/etc/cron.d/x", "* * * * * root true", header="a//etc/cron.d/x b//etc/cron.d/x"
            )
        },
        "0001-x.patch",
        1,
        ("'/etc/cron.d/x'", "absolute path"),
    ),
    Crafted(
        "absolute-plain-diff",
        "absolute",
        {
            "0001-x.patch": "--- /etc/passwd\t2020-01-01 00:00:00\n+++ /etc/passwd\n"
            f"@@ -1 +1 @@\n-{SECRET}+pwned\n"
        },
        "0001-x.patch",
        1,
        ("--- '/etc/passwd'", "absolute path"),
    ),
    # --- one gate registered twice in one patch
    Crafted(
        "gate-twice-in-one-hunk",
        "gate",
        {"0001-gate.patch": GATE_TWICE},
        "0001-gate.patch",
        10,
        ("feature gate KubeletTwice is registered twice in this patch (lines 8 and 10)",),
    ),
    Crafted(
        "gate-twice-in-two-files",
        "gate",
        {
            "0001-gate.patch": GATE_TWICE.replace(
                '+\n+\tKubeletTwice featuregate.Feature = "KubeletTwice"\n )', " )"
            ).replace("+4,7", "+4,5")
            + _create("pkg/features/more.go", MORE_GATES),
        },
        "0001-gate.patch",
        19,
        ("KubeletTwice is registered twice in this patch (lines 8 and 19)",),
    ),
    # --- copy from/to outside the tree
    Crafted(
        "copy-from-outside",
        "copy",
        {"0001-x.patch": _rename(PASSWD, "pkg/stolen", "copy")},
        "0001-x.patch",
        3,
        ("copy from '../../../etc/passwd'", *OUTSIDE),
    ),
    Crafted(
        "copy-to-outside",
        "copy",
        {"0001-x.patch": _rename("pkg/kubelet/status/status.go", "../../../etc/cron.d/x", "copy")},
        "0001-x.patch",
        4,
        ("copy to '../../../etc/cron.d/x'", *OUTSIDE),
    ),
]
