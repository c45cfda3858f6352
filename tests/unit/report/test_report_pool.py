"""`abtest report RUN1 RUN2 ...`: runs of different controllers on disjoint nodes, pooled into
one fleet run (node as a block factor, node x arm interaction), and the runs that may not be
pooled refused naming the difference."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abtest.app.report import build_model, build_pooled_model
from abtest.cli.main import app
from abtest.config.plan_options import PlanOptions
from abtest.engine.sweep import SweepOptions, run_sweep
from abtest.engine.sweep_plan import build_plan
from abtest.errors import UserError
from abtest.store.db import Store
from abtest.testing import FakeKit, FakeNode, fake_profiles


def _controller_run(store: Store, node_name: str, **kw: object) -> str:
    """One controller's sweep of one (fake) node."""
    options = {"playbook": "lab-sweep", "rounds": 2, "sizes": (10,), "seed": 7} | kw
    plan = build_plan(PlanOptions(**options))  # type: ignore[arg-type]
    node = FakeNode(node_name)
    plan = dataclasses.replace(plan, profiles=fake_profiles(plan.profiles[0], [node]))
    return run_sweep(
        plan, store, SweepOptions(command=f"ctl {node_name}"), lambda k, d: None,
        kit=FakeKit(node),
    ).run_id  # fmt: skip


def test_two_controllers_runs_on_disjoint_nodes_report_as_one_fleet_run(store: Store) -> None:
    a = _controller_run(store, "node-a", seed=7)
    b = _controller_run(store, "node-b", seed=8)  # its own block order
    model = build_pooled_model(store, [a, b])
    assert model.run_id == f"{a}+{b}"
    assert model.fleet is not None and model.fleet.nodes == ("node-a", "node-b")
    single = build_model(store, a)
    assert model.blocks == 2 * single.blocks == 4  # node/block pairs
    pooled = model.comparisons_for("batch_ready_s")[0]
    assert pooled.n_pairs == 2 * single.comparisons_for("batch_ready_s")[0].n_pairs
    assert model.fleet.interactions  # node x arm, as a fleet sweep has
    assert model.notes[0].startswith("pooled from 2 runs on disjoint nodes")


def test_the_cli_pools_several_run_ids(tmp_path: Path, store: Store) -> None:
    a, b = _controller_run(store, "node-a"), _controller_run(store, "node-b")
    out = tmp_path / "pooled"
    r = CliRunner().invoke(app, ["report", a, b, "--db", str(store.path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    md = (out / "report.md").read_text()
    assert "## Per node (node-a, node-b)" in md and "pooled from 2 runs" in md
    r = CliRunner().invoke(app, ["report", a, "--pool", "--db", str(store.path)])
    assert isinstance(r.exception, UserError) and "two or more" in str(r.exception)


@pytest.mark.parametrize(
    ("other", "says"),
    [
        ({"node_name": "node-a"}, "node node-a is in runs"),
        ({"sizes": (20,)}, "differ in sizes"),
        ({"design": "baseline+singles"}, "differ in design"),
        ({"qps": 500.0}, "differ in playbook plan.generator"),
    ],
)
def test_runs_that_do_not_pool_are_refused_naming_the_difference(
    store: Store, other: dict[str, object], says: str
) -> None:
    a = _controller_run(store, "node-a")
    node = str(other.pop("node_name", "node-b"))
    b = _controller_run(store, node, **other)
    with pytest.raises(UserError, match=says):
        build_pooled_model(store, [a, b])
