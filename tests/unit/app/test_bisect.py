"""`abtest bisect` on a fake node whose builds differ in speed (tests/bisect_fakes.py): the
culprit is found, a range whose ends do not differ stops after the ends, a stopped search
resumes where it was, and the node is left as found every time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bisect_fakes import FakeBuilder, SteppedKit, lab_nodes

from abtest.app.bisect import BisectRequest, run_bisect
from abtest.app.reach import Reach
from abtest.report.bisect import exit_code, render_html, render_markdown
from abtest.store.db import Store
from abtest.testing import FakeNode

DEMO = [
    "v1.36.3",
    "v1.36.3+bisect-demo.p1",
    "v1.36.3+bisect-demo.p2",
    "v1.36.3+bisect-demo.p3",
    "v1.36.3+bisect-demo",
]
RANGE = BisectRequest(good="v1.36.3", bad="v1.36.3+bisect-demo")


def _run(tmp_path: Path, kit: SteppedKit, node: FakeNode, req: BisectRequest = RANGE) -> Any:
    builder = FakeBuilder()
    req = replace(req, reach=Reach(db=tmp_path / "r.db"))
    model = run_bisect(req, lambda _: None, kit=kit, builder=builder, nodes=lab_nodes(node))
    return model, builder


def test_the_slowing_patch_of_a_series_is_named(tmp_path: Path) -> None:
    node = FakeNode("n1")
    model, builder = _run(tmp_path, SteppedKit(node, DEMO, DEMO[3], 0.3), node)
    node.verify()  # config, binary and lock as found
    c = model.conclusion
    assert (c.verdict, c.culprit, exit_code(model)) == ("CULPRIT", DEMO[3], 0)
    assert c.step is not None and c.step.lo is not None and c.step.lo > 10
    assert [s.outcome for s in model.steps] == ["FAIL", "GOOD", "BAD"]
    assert builder.checked == DEMO  # every build checked before the first was placed
    assert set(builder.placed) == {DEMO[0], DEMO[2], DEMO[3], DEMO[4]}  # .p1 never needed
    assert model.blocks == sum(s.blocks for s in model.steps) and model.blocks >= 9
    measured = {t.build for t in model.times}
    assert measured == {DEMO[0], DEMO[2], DEMO[3], DEMO[4]}
    md = render_markdown(model)
    assert "first bad build v1.36.3+bisect-demo.p3" in md and "| step 2 |" in md
    assert "v1.36.3+bisect-demo.p3" in render_html(model)
    with Store(tmp_path / "r.db") as store:  # every measurement is an ordinary stored run
        runs = store.runs_frame()
    assert sorted(runs["kind"]) == ["bisect"] * 3 and set(runs["status"]) == {"finished"}


def test_ends_that_do_not_differ_stop_the_search(tmp_path: Path) -> None:
    node = FakeNode("n1")
    model, builder = _run(tmp_path, SteppedKit(node, DEMO, None, 0.0), node)
    node.verify()
    assert model.conclusion.verdict == "NOT_CONFIRMED" and exit_code(model) == 3
    assert "is not confirmed slower" in model.conclusion.message
    assert len(model.steps) == 1 and set(builder.placed) == {DEMO[0], DEMO[4]}


def test_two_builds_confirmed_name_the_bad_end_without_a_search(tmp_path: Path) -> None:
    """Nothing lies between the ends: the confirmation is the whole bisection."""
    node = FakeNode("n1")
    ends = [DEMO[0], DEMO[4]]
    req = BisectRequest(builds=tuple(ends))
    model, builder = _run(tmp_path, SteppedKit(node, ends, ends[1], 0.3), node, req)
    node.verify()
    c = model.conclusion
    assert (c.verdict, c.culprit, exit_code(model)) == ("CULPRIT", ends[1], 0)
    assert [s.outcome for s in model.steps] == ["FAIL"] and set(builder.placed) == set(ends)
    assert c.step is not None and c.step.lo is not None and c.step.lo > 10  # the ends' step


class StopsAt(SteppedKit):
    """Fails the node at the ``stop``-th round (a lost node), once."""

    def __init__(self, *args: Any, stop: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.stop, self.count = stop, 0

    def run_round(self, cluster: Any, spec: Any) -> Any:
        self.count += 1
        if self.count == self.stop:
            raise RuntimeError("the node went away")
        return super().run_round(cluster, spec)


def test_a_stopped_search_resumes_where_it_was(tmp_path: Path) -> None:
    node = FakeNode("n1")
    # the ends take 6 rounds at the first look; the 8th round is in step 1
    said: list[str] = []
    with pytest.raises(RuntimeError, match="went away"):
        req = replace(RANGE, reach=Reach(db=tmp_path / "r.db"))
        stops = StopsAt(node, DEMO, DEMO[3], 0.3, stop=8)
        run_bisect(req, said.append, kit=stops, builder=FakeBuilder(), nodes=lab_nodes(node))
    node.verify()  # restored on the way out
    assert any("go on with: abtest bisect --resume" in line for line in said)
    with Store(tmp_path / "r.db") as store:
        entries = store.runs.with_plan_entry("bisect", "bisect")
    assert len(entries) == 2  # the ends, decided, and step 1, stopped
    root = next(run for run, entry in entries if "settings" in entry)
    again = FakeNode("n1")
    kit = SteppedKit(again, DEMO, DEMO[3], 0.3, seed=2)
    model, _ = _run(tmp_path, kit, again, BisectRequest(resume=root))
    again.verify()
    assert (model.conclusion.verdict, model.conclusion.culprit) == ("CULPRIT", DEMO[3])
    # the ends were not measured again; step 1's run was resumed, not started afresh
    rounds = [c for c in again.calls if c.startswith("round")]
    assert len(rounds) < 3 * 3 * 2
    with Store(tmp_path / "r.db") as store:
        assert len(store.runs_frame()) == 3


class Creeping(SteppedKit):
    """Every build 10 % slower than the one before: no one culprit."""

    def seconds(self, binary: str | None) -> float:
        build = (binary or "").split("/")[-2] if binary else "v1.36.3"
        noise = float(self.rng.normal(0, self.noise))
        return float(self.base * 1.1 ** self.order.index(build) * np.exp(noise))


def test_an_effect_spread_over_the_range_names_no_build(tmp_path: Path) -> None:
    node = FakeNode("n1")
    model, _ = _run(tmp_path, Creeping(node, DEMO, None, 0.0, noise=0.01), node)
    node.verify()
    c = model.conclusion
    assert (c.verdict, c.culprit, exit_code(model)) == ("SPREAD", None, 3)
    assert "spread over several builds" in c.message
    assert [s.outcome for s in model.steps] == ["FAIL", "SPREAD"]
