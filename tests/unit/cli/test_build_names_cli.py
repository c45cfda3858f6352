"""Kubelet build names through the real CLI: one parser (``parse_build_name``), each name checked
whole in every option that takes one (``bisect --good/--bad/--builds``, ``--kubelet-build``,
``--reference/--candidate binary=``, a catalog's kubelet_build level, a profile's
``kubelet.build``), so no option accepts what another refuses; a placed build's name needs the
node's ``kubelet.builds_dir`` in all of them, as the profile field does; two profiles for one
node are refused before anything is announced; and a series build the lab placed as
``v1.36.3+NAME`` is named by that name, also where its series' folder is not at hand."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from bad_input import PROFILE, Case, ids, invoke, run_case
from bisect_fakes import SteppedKit

import abtest.engine.sweep
from abtest.config.kubelet_series import parse_build_name
from abtest.lab import host, kubelet_builds, layout, patched_kubelets
from abtest.testing import FakeNode

WITH_DIR = PROFILE + "  builds_dir: /opt/kubelets\n"
BARE = PROFILE  # no kubelet.builds_dir
RELEASES_CATALOG = """\
catalog: builds
factors:
  - name: kubelet-v1.35.4
    kind: kubelet_build
    off: node
    on: v1.35.4
    summary: s
"""
FILES = {"node.yaml": WITH_DIR, "bare.yaml": BARE, "builds.yaml": RELEASES_CATALOG}
NEITHER = "is neither a kubelet release nor a release+series"
NO_DIR = "no kubelet.builds_dir"


def case(id: str, args: tuple[str, ...], *words: str) -> Case:
    return Case(id, args, words, dict(FILES))


BISECT = ("bisect", "--profile", "{tmp}/node.yaml", "--db", "{tmp}/r.db")
PLAN = ("plan", "--playbook", "lab-sweep", "--profile", "{tmp}/node.yaml")
GATES = ("gates", "--all", "--playbook", "lab-sweep", "--db", "{tmp}/r.db")
REGRESS = ("regress", "--profile", "{tmp}/node.yaml", "--db", "{tmp}/r.db")

WHOLE = [
    # the same name with a trailing newline is refused by every option, --builds too
    case("builds-newline", (*BISECT, "--builds", "v1.36.0,v1.36.1,v1.36.3\n"), "--builds", NEITHER),
    case("good-newline", (*BISECT, "--good", "v1.36.0\n", "--bad", "v1.36.3"), "--good", NEITHER),
    case("bad-newline", (*BISECT, "--good", "v1.36.0", "--bad", "v1.36.3\n"), "--bad", NEITHER),
    case("builds-space", (*BISECT, "--builds", "v1.36.0, v1.36.1,v1.36.3"), "' v1.36.1'", NEITHER),
    case("builds-empty-item", (*BISECT, "--builds", "v1.36.0,,v1.36.3"), "''", NEITHER),
    case("builds-trailing-comma", (*BISECT, "--builds", "v1.36.0,v1.36.1,"), "''", NEITHER),
    case("builds-empty", (*BISECT, "--builds", ""), "--builds", NEITHER),
    case("plan-build-empty", (*PLAN, "--kubelet-build", ""), "--kubelet-build", NEITHER),
    case("plan-build-newline", (*PLAN, "--kubelet-build", "v1.36.3\n"), "--kubelet-build", NEITHER),
    case("plan-build-folder", (*PLAN, "--kubelet-build", "v1.36.3+./s"), "--kubelet-build"),
    case(
        "gates-build-empty",
        (*GATES, "--profile", "{tmp}/node.yaml", "--kubelet-build", ""),
        "--kubelet-build",
        NEITHER,
    ),
    case(
        "binary-newline",
        (*REGRESS, "--candidate", "binary=v1.36.3\n"),
        "--candidate binary=",
        NEITHER,
    ),
    case(
        "binary-space",
        (*REGRESS, "--candidate", "kubeAPIQPS=5,binary=v1.36.3 "),
        "--candidate binary=",
        NEITHER,
    ),
    Case(
        "profile-build-newline",
        ("plan", "--playbook", "lab-sweep", "--profile", "{tmp}/p.yaml"),
        ("p.yaml", "kubelet.build", NEITHER),
        {"p.yaml": WITH_DIR + '  build: "v1.36.3\\n"\n'},
    ),
]

BUILDS_DIR = [
    case(
        "plan-build-no-dir",
        (
            "plan",
            "--playbook",
            "lab-sweep",
            "--profile",
            "{tmp}/bare.yaml",
            "--kubelet-build",
            "v1.36.3",
        ),
        "--kubelet-build",
        NO_DIR,
    ),
    case(
        "gates-build-no-dir",
        (*GATES, "--profile", "{tmp}/bare.yaml", "--kubelet-build", "v1.36.3"),
        "--kubelet-build",
        NO_DIR,
    ),
    case(
        "gates-series-no-dir",
        (*GATES, "--profile", "{tmp}/bare.yaml", "--kubelet-build", "v1.36.3+agc"),
        "--kubelet-build",
        NO_DIR,
    ),
    case(
        "binary-no-dir",
        ("regress", "--profile", "{tmp}/bare.yaml", "--candidate", "binary=v1.36.3"),
        "--candidate binary=",
        NO_DIR,
    ),
    case(
        "catalog-level-no-dir",
        (
            "plan",
            "--playbook",
            "lab-releases",
            "--catalog",
            "{tmp}/builds.yaml",
            "--profile",
            "{tmp}/bare.yaml",
        ),
        "bare.yaml",
        NO_DIR,
    ),
]


@pytest.mark.parametrize("bad", WHOLE + BUILDS_DIR, ids=ids(WHOLE + BUILDS_DIR))
def test_a_build_name_is_refused_whole_by_every_option(
    bad: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_node() -> None:
        raise AssertionError("a node was reached")

    monkeypatch.setattr(abtest.engine.sweep, "RealNodes", no_node)
    run_case(bad, tmp_path, capsys)
    if bad.args[0] != "regress":  # a live regress opens its database before it plans
        assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("bisect", "--builds", "v1.36.0,v1.36.1,v1.36.3"),
        ("regress", "--candidate", "binary=v1.36.3"),
        ("gates", "--all", "--playbook", "lab-sweep", "--kubelet-build", "v1.36.3"),
    ],
    ids=["bisect", "regress", "gates"],
)
def test_two_profiles_for_one_node_are_refused_before_anything_is_said(
    args: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_node() -> None:
        raise AssertionError("a node was reached")

    monkeypatch.setattr(abtest.engine.sweep, "RealNodes", no_node)
    (tmp_path / "node.yaml").write_text(WITH_DIR)
    twice = ("--profile", "node.yaml", "--profile", "node.yaml", "--db", str(tmp_path / "r.db"))
    done = invoke([*args, *twice], tmp_path, capsys)
    assert done.code == 2, done.err
    assert done.err.strip().splitlines() == [done.err.strip()], done.err  # nothing announced
    assert "both name node n1" in done.err and done.out == ""


def test_the_placed_name_of_a_series_build_is_a_build_name_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`v1.36.3+bd2` (a user's folder `bd2`, placed by the lab under that name) is accepted by
    the one parser and by --kubelet-build and binary=, none of which needs the folder."""
    assert parse_build_name("v1.36.3+bd2", "--builds").name == "v1.36.3+bd2"
    (tmp_path / "node.yaml").write_text(WITH_DIR)
    plan = invoke(["plan", "--playbook", "lab-sweep", "--profile", "node.yaml", "--kubelet-build",
                   "v1.36.3+bd2"], tmp_path, capsys)  # fmt: skip
    assert plan.code == 0, plan.err
    assert "kubelet.binary=v1.36.3+bd2" in plan.out


def _lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, placed: list[str]) -> layout.Paths:
    """A lab state folder in tmp with ``placed`` series builds as `abtest lab kubelets` leaves
    them (the kubelet and a source.json naming the build), standing in for /var/lib/abtest-lab."""
    paths = layout.Paths(root=tmp_path / "state", run=tmp_path / "run")
    for name in placed:
        folder = paths.kubelets / name
        folder.mkdir(parents=True)
        (folder / "kubelet").write_bytes(b"\x7fELF" + name.encode())
        (folder / "source.json").write_text(json.dumps({"build": name, "series": name[8:]}))
    monkeypatch.setattr(layout, "Paths", functools.partial(layout.Paths, paths.root, paths.run))
    monkeypatch.setattr(kubelet_builds, "Paths", layout.Paths)
    monkeypatch.setattr(host, "require_root", lambda: None)

    def no_build(*_args: object, **_kw: object) -> None:
        raise AssertionError("a placed build was built again")

    monkeypatch.setattr(kubelet_builds, "ensure_patched_kubelet", no_build)
    monkeypatch.setattr(patched_kubelets, "ensure_patched_kubelet", no_build)
    return paths


PLACED = ["v1.36.3+bd1", "v1.36.3+bd2", "v1.36.3+bd4"]


def test_a_bisection_over_builds_the_lab_placed_names_them_by_their_placed_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the lab (a profile whose builds_dir is the lab's), `bisect --builds` of series builds
    placed from a user's folders used to stop at "unknown patch series 'bd1'"."""
    paths = _lab(tmp_path, monkeypatch, PLACED)
    (tmp_path / "lab.yaml").write_text(PROFILE + f"  builds_dir: {paths.kubelets}\n")
    node = FakeNode("n1")
    kit = SteppedKit(node, PLACED, "v1.36.3+bd2", 0.25)
    monkeypatch.setattr(abtest.engine.sweep, "RealNodes", lambda: kit)
    args = ["bisect", "--builds", ",".join(PLACED), "--profile", "lab.yaml", "--json",
            "--db", str(tmp_path / "r.db")]  # fmt: skip
    done = invoke(args, tmp_path, capsys)
    assert done.code == 0, done.err
    out = json.loads(done.out)
    assert (out["verdict"], out["culprit"]) == ("CULPRIT", "v1.36.3+bd2")
    assert "placed already" in done.err
    node.verify()


def test_a_build_not_placed_under_that_name_is_still_an_unknown_series(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _lab(tmp_path, monkeypatch, ["v1.36.3+bd1"])
    # a folder of that name without the source.json naming it is no placed series build
    (paths.kubelets / "v1.36.3+bd4").mkdir()
    (paths.kubelets / "v1.36.3+bd4" / "kubelet").write_bytes(b"x")
    (tmp_path / "lab.yaml").write_text(PROFILE + f"  builds_dir: {paths.kubelets}\n")
    for missing in ("v1.36.3+bd2", "v1.36.3+bd4"):
        builds = ",".join(["v1.36.3+bd1", missing, "v1.36.3+agc"])
        case = Case("unknown", ("bisect", "--builds", builds, "--profile", "lab.yaml"),
                    (f"unknown patch series '{missing[8:]}'",))  # fmt: skip
        run_case(case, tmp_path, capsys)


def test_placing_a_placed_build_again_by_its_name_uses_it_as_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _lab(tmp_path, monkeypatch, ["v1.36.3+bd2"])
    said: list[str] = []
    before = (paths.kubelets / "v1.36.3+bd2" / "kubelet").read_bytes()
    placed = kubelet_builds.place_kubelets([parse_build_name("v1.36.3+bd2", "BUILD")], said.append)
    assert placed == [paths.kubelets / "v1.36.3+bd2" / "kubelet"]
    assert (paths.kubelets / "v1.36.3+bd2" / "kubelet").read_bytes() == before
    assert said == [f"kubelet v1.36.3+bd2 placed already at {placed[0]}"]
