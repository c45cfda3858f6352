"""The rounds' start against the kubelet's 1 s relist in the report's Method (issue 46): the
random start's width from the stored plan; a run from before it, or with it off, says what
that means; rounds abtest did not make (no generator in the plan) get no line."""

from __future__ import annotations

import json

import pytest
from sweeps import build_sweep

from abtest.app.report import build_model
from abtest.report import render_markdown
from abtest.store.db import Store


def _start_lines(store: Store, run_id: str) -> list[str]:
    return [m for m in build_model(store, run_id).method if m.startswith("Start phase")]


def _set_generator(store: Store, run_id: str, generator: object) -> None:
    plan = json.loads(store.run_row(run_id)["plan_json"] or "{}")
    plan["generator"] = generator
    store.update("runs", {"id": run_id}, {"plan_json": json.dumps(plan)})


@pytest.mark.parametrize(
    ("generator", "says"),
    [
        ({"qps": 1000, "start_dither_s": 1.0}, "waited a uniform 0-1 s after the watch opened"),
        ({"qps": 1000, "start_dither_s": 0}, "the random start was off"),
        ({"qps": 1000}, "from before the random start"),
    ],
)
def test_the_method_says_how_the_rounds_started(
    store: Store, generator: dict[str, float], says: str
) -> None:
    run_id = build_sweep(store)
    _set_generator(store, run_id, generator)
    (line,) = _start_lines(store, run_id)
    assert says in line
    if "start_dither_s" not in generator or not generator["start_dither_s"]:
        assert "a change in work can show as nothing or as a whole tick" in line
    assert line in render_markdown(build_model(store, run_id))


def test_rounds_without_a_generator_in_their_plan_get_no_start_line(store: Store) -> None:
    run_id = build_sweep(store)
    _set_generator(store, run_id, None)
    assert _start_lines(store, run_id) == []
