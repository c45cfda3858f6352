"""`abtest history`: a node's series across runs, change points by Apache Otava, what changed,
the outputs, the nightly alarm, and the bad inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from history_store import NODE, add_runs
from typer.testing import CliRunner

from abtest.app.history import HistoryRequest, history, new_alarms
from abtest.cli.main import app
from abtest.errors import UserError
from abtest.stats.changepoints import MIN_RUNS, ChangePoint
from abtest.store.db import Store

STEP = [5.0] * 5 + [5.6] * 5  # +12 % from run 6 on, with a kubelet swap there
KUBELET = ["v1.36.0"] * 5 + ["v1.36.1"] * 5


def test_a_step_is_found_at_its_run_with_its_size_and_what_changed(store: Store) -> None:
    ids = add_runs(store, STEP, kubelet=KUBELET)
    h = history(HistoryRequest(node=NODE, db=store.path))
    assert (h.arm, h.size, len(h.figures)) == ("baseline", 10, 10)
    assert [f.run_id for f in h.figures] == ids
    (cp,) = h.change_points
    assert cp.index == 5 and cp.run_id == ids[5] and cp.slower
    assert cp.step_low is not None and cp.step_high is not None
    assert cp.step_low < 12.0 < cp.step_high and cp.step_low > 5
    assert h.changed[0]["kubelet_version"] == ["v1.36.0", "v1.36.1"]
    assert h.changed[0]["config_sha256"] == ["cfg-v1.36.0", "cfg-v1.36.1"]
    assert all(f.low is not None and f.low < f.value < (f.high or 0) for f in h.figures)


def test_what_changed_names_the_kubelet_settings_the_runs_found_different(
    store: Store,
) -> None:
    base = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    before = base + "kubeAPIQPS: 50\nfeatureGates: {A: true}\n"
    after = base + "kubeAPIQPS: 8\nfeatureGates: {A: true, B: false}\n"
    add_runs(store, STEP, configs=[before] * 5 + [after] * 5)
    h = history(HistoryRequest(node=NODE, db=store.path))
    (changed,) = h.changed
    assert changed["config.kubeAPIQPS"] == [50, 8]
    assert changed["config.featureGates.B"] == [None, False]
    assert "config.featureGates.A" not in changed  # unchanged settings are not listed


def test_a_pool_of_nodes_is_one_series_over_the_runs_of_both(store: Store) -> None:
    ids = add_runs(store, STEP, kubelet=KUBELET, nodes=(NODE, "node-i"))
    h = history(HistoryRequest(node=(NODE, "node-i"), db=store.path))
    assert h.node == f"{NODE}+node-i" and h.figures[0].rounds == 10  # 5 rounds on each node
    (cp,) = h.change_points
    assert cp.run_id == ids[5] and h.changed[0]["kubelet_version"] == ["v1.36.0", "v1.36.1"]
    r = CliRunner().invoke(
        app, ["history", "--node", NODE, "--node", "node-i", "--db", str(store.path), "--out",
              str(store.path.parent / "pool")],
    )  # fmt: skip
    assert r.exit_code == 0, r.output


def test_a_flat_series_has_no_change_point(store: Store) -> None:
    add_runs(store, [5.0] * 10)
    assert history(HistoryRequest(node=NODE, db=store.path)).change_points == []


def test_the_cli_writes_md_html_json_and_pages_on_a_new_slowdown(
    tmp_path: Path, store: Store
) -> None:
    add_runs(store, STEP, kubelet=KUBELET)
    out = tmp_path / "h"
    args = ["history", "--node", NODE, "--db", str(store.path), "--out", str(out)]
    r = CliRunner().invoke(app, [*args, "--fail-on-new", "5"])
    assert r.exit_code == 1, r.output  # the step is at run 6 of 10: within the last 5
    assert "ALARM" in r.output and "kubelet_version: v1.36.0 -> v1.36.1" in r.output
    doc = json.loads((out / "history.json").read_text())
    assert doc["detector"]["name"] == "apache-otava" and len(doc["runs"]) == 10
    assert doc["change_points"][0]["slower"] and doc["alarms"]
    page = (out / "history.html").read_text()
    assert "data:image/png;base64," in page and "v1.36.1" in page
    assert (out / "history.png").read_bytes()[:4] == b"\x89PNG"
    # the step began at run 6 and was confirmed at run 8 (its third run): within the last 3
    # runs, not within the last 2
    r = CliRunner().invoke(app, [*args, "--fail-on-new", "3"])
    assert r.exit_code == 1, r.output
    r = CliRunner().invoke(app, [*args, "--fail-on-new", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["change_points"][0]["index"] == 5


def test_a_faster_change_does_not_page(tmp_path: Path, store: Store) -> None:
    add_runs(store, [5.6] * 5 + [5.0] * 5)
    args = ["history", "--node", NODE, "--db", str(store.path), "--out", str(tmp_path)]
    r = CliRunner().invoke(app, [*args, "--fail-on-new", "8"])
    assert r.exit_code == 0 and "faster" in r.output, r.output


def test_one_slow_last_night_is_unconfirmed_and_pages_only_when_asked(
    tmp_path: Path, store: Store
) -> None:
    add_runs(store, [5.0] * 11 + [6.5])  # the last run 30 % slower
    h = history(HistoryRequest(node=NODE, db=store.path, fail_on_new=1))
    assert h.alarms == [] and all(not cp.confirmed for cp in h.change_points)
    args = ["history", "--node", NODE, "--db", str(store.path), "--out", str(tmp_path)]
    r = CliRunner().invoke(app, [*args, "--fail-on-new", "1"])
    assert r.exit_code == 0, r.output
    if h.change_points:  # Otava found it: shown, marked as what it is
        assert "unconfirmed" in r.output
    asked = CliRunner().invoke(app, [*args, "--fail-on-new", "1", "--alarm-unconfirmed"])
    assert asked.exit_code == (1 if h.change_points else 0), asked.output


def test_a_step_pages_the_night_its_third_run_confirms_it(store: Store) -> None:
    levels = [5.0] * 9 + [6.0] * 3
    add_runs(store, levels[:11])  # two slow nights so far: not yet
    h = history(HistoryRequest(node=NODE, db=store.path, fail_on_new=1))
    assert h.alarms == []
    add_runs(store, levels[11:], seed=2)  # the third: confirmed, pages
    h = history(HistoryRequest(node=NODE, db=store.path, fail_on_new=1))
    (cp,) = h.alarms
    assert cp.confirmed and cp.index == 9 and cp.runs_after == 3


def test_one_odd_run_mid_series_is_not_a_change_point(store: Store) -> None:
    add_runs(store, [5.0] * 6 + [7.0] + [5.0] * 6)
    assert history(HistoryRequest(node=NODE, db=store.path)).change_points == []


def test_too_few_runs_says_how_many_it_needs(store: Store) -> None:
    add_runs(store, [5.0] * (MIN_RUNS - 1))
    with pytest.raises(UserError, match=f"has {MIN_RUNS - 1} run.*at least {MIN_RUNS}"):
        history(HistoryRequest(node=NODE, db=store.path))
    r = CliRunner().invoke(app, ["history", "--node", NODE, "--db", str(store.path)])
    assert isinstance(r.exception, UserError) and r.exception.exit_code == 2


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"node": "nowhere"}, "no accepted rounds"),
        ({"arm": "+gate"}, "no rounds of arm"),
        ({"size": 99}, "never measured at 99"),
        ({"metric": "nope"}, "unknown metric"),
        ({"fail_on_new": 0}, "at least 1"),
        ({"alarm_unconfirmed": True}, "needs --fail-on-new"),
    ],
)
def test_bad_history_requests_say_what_is_wrong(
    store: Store, kw: dict[str, Any], says: str
) -> None:
    add_runs(store, [5.0] * MIN_RUNS)
    base: dict[str, Any] = {"node": NODE, "db": store.path}
    with pytest.raises(UserError, match=says):
        history(HistoryRequest(**(base | kw)))


def _cp(index: int, step: float = 20.0, confirmed: bool = True) -> ChangePoint:
    return ChangePoint(index, f"r{index}", "", 5.0, 5.0 * (1 + step / 100), step, None, None,
                       1e-4, confirmed, 3)  # fmt: skip


def test_the_pager_pages_on_a_step_the_earlier_reports_did_not_show_whichever_night() -> None:
    """Issue 46: Otava found a step on its fifth night; the pager (tied to the third) never
    paged. Now: new against the earlier reports, whichever night; once."""
    step = _cp(6)  # 14 runs: the step's eighth night, first found tonight
    assert new_alarms([step], 14, 1, earlier=[]) == [step]
    # shown before (Otava may place it a run apart from night to night): no second page
    assert new_alarms([step], 14, 1, earlier=[_cp(7)]) == []
    # shown before only unconfirmed, or as faster: tonight's confirmation is new
    assert new_alarms([step], 14, 1, earlier=[_cp(6, confirmed=False)]) == [step]
    assert new_alarms([step], 14, 1, earlier=[_cp(6, step=-20.0)]) == [step]
    # a second step further on is another change
    assert new_alarms([_cp(2), step], 14, 1, earlier=[_cp(2)]) == [step]
    assert new_alarms([_cp(6, step=-20.0)], 14, 1, earlier=[]) == []
    # a step whose interval reaches 0 pages on no night
    unsure = ChangePoint(6, "r6", "", 5.0, 5.5, 10.0, -1.0, 21.0, 1e-3, True, 3)
    assert new_alarms([unsure], 14, 1, earlier=[]) == []
