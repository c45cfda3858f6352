"""`abtest bisect` end to end through the real CLI on a fake node (tests/bisect_fakes.py): an
injected slowdown at one release of an explicit range is found, then `abtest report` renders the
bisection; and its bad input, one line each, before anything is built or a node touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_input import PROFILE, Case, ids, invoke, run_case
from bisect_fakes import SteppedKit

import abtest.engine.sweep
from abtest.batch.run_record import new_run
from abtest.config.playbook import load_profile
from abtest.store.db import Store
from abtest.testing import FakeNode

RELEASES = ["v1.34.4", "v1.35.4", "v1.36.0", "v1.36.1", "v1.36.3"]
NODE_PROFILE = PROFILE + "  builds_dir: /opt/kubelets\n"


def test_an_injected_slowdown_is_found_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "node.yaml").write_text(NODE_PROFILE)
    node = FakeNode("n1")
    kit = SteppedKit(node, RELEASES, "v1.36.0", 0.25)
    # the one stand-in: the sweep's nodes are the fake kit (the CLI, use case, search,
    # measurements, store and report are the real ones)
    monkeypatch.setattr(abtest.engine.sweep, "RealNodes", lambda: kit)
    db = str(tmp_path / "r.db")
    args = ["bisect", "--builds", ",".join(RELEASES), "--profile", "node.yaml", "--db", db]
    done = invoke([*args, "--json"], tmp_path, capsys)
    assert done.code == 0, done.err
    out = json.loads(done.out)
    assert (out["verdict"], out["culprit"]) == ("CULPRIT", "v1.36.0")
    assert out["blocks"] >= 9 and next(s["outcome"] for s in out["steps"]) == "FAIL"
    node.verify()
    report = invoke(["report", out["bisection"], "--db", db, "--out", "rep"], tmp_path, capsys)
    assert report.code == 0, report.err
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "first bad build v1.36.0" in md and "v1.35.4" in md
    assert (tmp_path / "rep" / "report.html").is_file()
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["culprit"] == "v1.36.0"
    csv = invoke(["report", out["bisection"], "--db", db, "-f", "csv", "-o", "c"], tmp_path, capsys)
    assert csv.code == 2 and "a bisection has no csv form" in csv.err


BAD = [
    Case(
        "same-build", ("bisect", "--good", "v1.36.3", "--bad", "v1.36.3"), ("--bad", "same build")
    ),
    Case("one-build", ("bisect", "--builds", "v1.36.3"), ("holds 1 build",)),
    Case("build-twice", ("bisect", "--builds", "v1.36.1,v1.36.3,v1.36.1"), ("twice",)),
    Case(
        "unknown-series",
        ("bisect", "--builds", "v1.36.3,v1.36.3+nosuch,v1.36.3+agc"),
        ("unknown patch series 'nosuch'",),
    ),
    Case("too-old", ("bisect", "--builds", "v1.30.0,v1.35.4,v1.36.3"), ("older than the lab",)),
    Case(
        "skew-newer",
        ("bisect", "--builds", "v1.36.3,v1.37.0,v1.38.0"),
        ("kubelet build v1.37.0", "newer than the api server"),
    ),
    Case(
        "prefix-past-series",
        ("bisect", "--builds", "v1.36.3,v1.36.3+bisect-demo.p7,v1.36.3+bisect-demo"),
        ("no prefix",),
    ),
    Case("good-newer", ("bisect", "--good", "v1.36.3", "--bad", "v1.34.4"), ("--good", "newer")),
    Case(
        "unrelated-ends",
        ("bisect", "--good", "v1.35.4", "--bad", "v1.36.3+agc"),
        ("no range from v1.35.4 to v1.36.3+agc",),
    ),
    Case("no-range", ("bisect",), ("name the range",)),
    Case(
        "unknown-metric",
        ("bisect", "--good", "v1.36.1", "--bad", "v1.36.3", "--metric", "p99"),
        ("--metric", "unknown metric 'p99'"),
    ),
    Case(
        "size-not-in-playbook",
        ("bisect", "--builds", "v1.35.4,v1.36.1,v1.36.3", "--size", "20"),
        ("--size", "not in playbook lab-regression"),
    ),
    Case(
        "max-blocks-1",
        ("bisect", "--builds", "v1.35.4,v1.36.1,v1.36.3", "--max-blocks", "1"),
        ("--max-blocks",),
    ),
    Case(
        "builds-and-other-ends",
        ("bisect", "--builds", "v1.35.4,v1.36.1,v1.36.3", "--good", "v1.34.4"),
        ("first and last of --builds",),
    ),
    Case(
        "resume-no-db",
        ("bisect", "--resume", "20261202-070818-ebd065", "--db", "{tmp}/none.db"),
        ("no results database",),
        untouched=("none.db",),
    ),
]


@pytest.mark.parametrize("case", BAD, ids=ids(BAD))
def test_bad_input_is_one_line_and_touches_nothing(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_node() -> None:
        raise AssertionError("a node was reached")

    monkeypatch.setattr(abtest.engine.sweep, "RealNodes", no_node)
    run_case(case, tmp_path, capsys)
    assert not (tmp_path / "abtest.db").exists()


def test_resume_of_a_run_that_is_not_a_bisection_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.db"
    with Store(db) as store:
        run = new_run(store, "sweep", command="t", profile=load_profile("lab"), node_name="n1")
    done = invoke(["bisect", "--resume", run, "--db", str(db)], tmp_path, capsys)
    assert done.code == 2 and f"run {run} is not a bisection" in done.err
    assert len(done.err.strip().splitlines()) == 1


def test_a_part_of_a_series_is_a_range_of_its_prefixes() -> None:
    from abtest.app.bisect_builds import build_range

    def names(good: str, bad: str) -> list[str]:
        return [b.name for b in build_range(good, bad, (), lambda g, b: [])]

    demo = "v1.36.3+bisect-demo"
    assert names("v1.36.3", demo) == ["v1.36.3", *(f"{demo}.p{k}" for k in (1, 2, 3)), demo]
    assert names(f"{demo}.p1", demo) == [f"{demo}.p{k}" for k in (1, 2, 3)] + [demo]
    assert names("v1.36.3", f"{demo}.p2") == ["v1.36.3", f"{demo}.p1", f"{demo}.p2"]
