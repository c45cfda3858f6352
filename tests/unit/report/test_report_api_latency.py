"""The kubelet's way to the API server in the report's Method (issue 45): the lab proxy's delay
recorded in the run's environment (``api_latency``), and the round trip the kubelet saw per
verb (each analysed round's mean of its rest_client_request_duration_seconds delta, hosts
summed, the median over rounds). No line by default (no ``api_latency``); at 0 ms through the
proxy, the same line as a delayed run's, so that a 0 ms control says what it is compared with."""

from __future__ import annotations

import json

from sweeps import SweepSpec, build_sweep

from abtest.analysis.api_path import round_trips
from abtest.analysis.run_data import run_data
from abtest.app.report import build_model
from abtest.report import render_markdown
from abtest.store.db import Store
from abtest.store.run_frames import read_run

METRIC = "rest_client_request_duration_seconds"


def _labels(verb: str, host: str = "127.0.0.1:6444") -> str:
    return f'host="{host}",verb="{verb}"'


def _set_env(store: Store, run_id: str, **extra: object) -> None:
    env = json.loads(store.run_row(run_id)["env_json"])
    store.update("runs", {"id": run_id}, {"env_json": json.dumps(env | extra)})


def _add_round_trips(store: Store, run_id: str) -> None:
    """Every round: PATCH 12 ms on average in block 1 and 14 ms after (split over two hosts in
    even blocks, 10 ms and 18 ms, whose pooled mean is still 14); GET 11 ms; warm-up and
    rejected rounds 900 ms (must not count)."""
    for r in store.rounds_frame(run_id).to_dict(orient="records"):
        analysed = r["accepted"] == 1 and r["warmup"] == 0
        patch = (0.012 if r["block"] == 1 else 0.014) if analysed else 0.9
        rows = [(_labels("GET"), 0.011 if analysed else 0.9, 40.0)]
        if analysed and r["block"] % 2 == 0:
            rows += [(_labels("PATCH"), 0.010, 20.0), (_labels("PATCH", "x:6443"), 0.018, 20.0)]
        else:
            rows.append((_labels("PATCH"), patch, 40.0))
        store.insert_many(
            "metric_deltas",
            [
                {
                    "round_id": int(r["id"]),
                    "metric": METRIC,
                    "labels": labels,
                    "delta_sum": mean * n,
                    "delta_count": n,
                }
                for labels, mean, n in rows
            ],
        )


def _api_lines(store: Store, run_id: str) -> list[str]:
    return [m for m in build_model(store, run_id).method if m.startswith("API path")]


def test_a_proxy_delay_and_the_kubelets_round_trip_per_verb_are_in_the_method(
    store: Store,
) -> None:
    run_id = build_sweep(store)
    _add_round_trips(store, run_id)
    _set_env(store, run_id, api_latency={"ms": 10, "jitter_ms": 2, "through": "x"})
    trips = {t.verb: t for t in round_trips(run_data(read_run(store, run_id)))}
    assert list(trips) == ["PATCH", "GET"]  # the pod's own verbs first
    # 4 of 5 blocks at 14 ms (two hosts pooled), block 1 at 12 ms: the median is 14
    assert abs(trips["PATCH"].median_s - 0.014) < 1e-9
    assert abs(trips["GET"].median_s - 0.011) < 1e-9
    analysed = store.rounds_frame(run_id).query("accepted == 1 and warmup == 0")
    assert trips["PATCH"].n_rounds == len(analysed)
    (line,) = _api_lines(store, run_id)
    assert "latency proxy adding 10 ms (jitter 2 ms)" in line
    assert "generator and watcher used the direct path" in line
    assert "PATCH 14 ms, GET 11 ms" in line
    assert line in render_markdown(build_model(store, run_id))


def test_no_line_by_default_and_the_round_trip_at_zero_through_the_proxy(store: Store) -> None:
    run_id = build_sweep(store)
    _add_round_trips(store, run_id)
    assert _api_lines(store, run_id) == []
    _set_env(store, run_id, api_latency={"ms": 0, "jitter_ms": 0})  # no proxy named
    assert _api_lines(store, run_id) == []
    _set_env(store, run_id, api_latency={"ms": 0, "jitter_ms": 0, "through": "x"})
    (line,) = _api_lines(store, run_id)
    assert "through the lab's proxy adding no delay (--api-latency 0)" in line
    assert "PATCH 14 ms, GET 11 ms" in line  # the control's round trip, as a delayed run's
    assert "Failed status writes: not recorded" in line


def test_a_multi_node_run_gets_a_line_per_delayed_node_with_its_own_rounds(
    store: Store,
) -> None:
    run_id = build_sweep(store, SweepSpec(run_id="sweep-nodes"))
    _add_round_trips(store, run_id)
    nodes = {
        "lab-node": {"api_latency": {"ms": 20, "jitter_ms": 0}},
        "sd-node": {"node": {"node_name": "sd-node"}},  # the systemd node: direct path
    }
    _set_env(store, run_id, nodes=nodes)
    (line,) = _api_lines(store, run_id)
    assert line.startswith("API path on lab-node: ")
    assert "adding 20 ms (jitter 0 ms)" in line and "PATCH 14 ms" in line


def test_a_proxy_that_did_not_answer_and_a_run_without_scrapes_say_so(store: Store) -> None:
    run_id = build_sweep(store)
    _set_env(store, run_id, api_latency={"through": "x", "error": "connection refused"})
    (line,) = _api_lines(store, run_id)
    assert "could not be read at the run's start (connection refused)" in line
    assert "round trip was not recorded" in line


def _add_patch_codes(store: Store, run_id: str, failed_in_block: dict[int, int]) -> None:
    """Every round: 20 PATCH requests, of which `failed_in_block[block]` got no response
    (code <error>) or a 409, the rest 200; GETs never count; warm-up and rejected rounds all
    fail (must not count)."""
    for r in store.rounds_frame(run_id).to_dict(orient="records"):
        analysed = r["accepted"] == 1 and r["warmup"] == 0
        failed = failed_in_block.get(int(r["block"]), 0) if analysed else 20
        rows = [("200", "GET", 50.0), ("200", "PATCH", 20.0 - failed)]
        rows += [("<error>", "PATCH", failed - failed // 2), ("409", "PATCH", failed // 2)]
        store.insert_many(
            "metric_deltas",
            [
                {
                    "round_id": int(r["id"]),
                    "metric": "rest_client_requests_total",
                    "labels": f'code="{code}",host="127.0.0.1:6444",method="{method}"',
                    "delta_sum": None,
                    "delta_count": n,
                }
                for code, method, n in rows
                if n
            ],
        )


def test_failed_status_writes_beside_the_fault_setting(store: Store) -> None:
    run_id = build_sweep(store)
    _add_round_trips(store, run_id)
    _add_patch_codes(store, run_id, {1: 0, 2: 2, 3: 2, 4: 3, 5: 4})
    _set_env(store, run_id, api_latency={"ms": 0, "jitter_ms": 0}, api_faults={"cut_after_kib": 8})
    (line,) = _api_lines(store, run_id)
    assert "cut each kubelet connection after 8 KiB of its requests (--api-faults)" in line
    assert "PATCH 14 ms" in line  # the round trip goes with either setting
    # per round 0, 10, 10, 15, 20 %: the median 10 %; the counts over every analysed round
    assert "Failed status writes: 10.0% of the kubelet's PATCH requests" in line
    analysed = store.rounds_frame(run_id).query("accepted == 1 and warmup == 0")
    blocks = analysed["block"].value_counts()
    failed = sum(int(blocks.get(b, 0)) * n for b, n in {2: 2, 3: 2, 4: 3, 5: 4}.items())
    assert f"({failed} of {20 * len(analysed)} over {len(analysed)} analysed rounds" in line


def test_failed_writes_get_a_line_without_any_setting_and_none_without_failures(
    store: Store,
) -> None:
    run_id = build_sweep(store)
    _add_patch_codes(store, run_id, {})
    assert _api_lines(store, run_id) == []
    other = build_sweep(store, SweepSpec(run_id="sweep-failing"))
    _add_patch_codes(store, other, {3: 5})
    (line,) = _api_lines(store, other)
    assert line.startswith("API path on lab-node: Failed status writes: 0.0%")
