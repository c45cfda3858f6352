"""The pod template and the kubelet metrics parser (pure)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from abtest.batch import metrics
from abtest.batch.template import (
    MANAGED_BY,
    MANAGED_BY_KEY,
    ROUND_LABEL,
    RUN_LABEL,
    render_batch,
    round_selector,
)
from abtest.config.playbook import Workload
from abtest.errors import ConfigError
from abtest.report import tables_reference


def test_reference_workload_matches_design() -> None:
    pods = render_batch(
        Workload(), size=3, namespace="ns1", node_name="node-a", run_id="r1", round_tag="abc"
    )
    assert [p.name for p in pods] == ["abt-abc-0000", "abt-abc-0001", "abt-abc-0002"]
    body = pods[0].body
    assert body["metadata"]["namespace"] == "ns1"
    assert body["metadata"]["labels"] == {
        MANAGED_BY_KEY: MANAGED_BY, RUN_LABEL: "r1", ROUND_LABEL: "abc",
    }  # fmt: skip
    assert "annotations" not in body["metadata"]
    spec = body["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "nodeName" not in spec and "nodeSelector" not in spec  # scheduling is timed
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}
    ]
    assert "runtimeClassName" not in spec
    assert "volumes" not in spec and "initContainers" not in spec
    (c,) = spec["containers"]
    assert c["image"] == "docker.io/library/busybox:1.36.1"
    assert c["command"] == ["sleep", "3600"]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["resources"] == {
        "requests": {"cpu": "100m", "memory": "1Mi"},
        "limits": {"cpu": "2", "memory": "128Mi"},
    }
    assert "readinessProbe" not in c and "livenessProbe" not in c
    assert json.loads(pods[0].json_bytes()) == body
    assert round_selector("abc") == f"{MANAGED_BY_KEY}={MANAGED_BY},{ROUND_LABEL}=abc"


def test_runtime_class_annotations_and_probe() -> None:
    w = Workload(
        runtime_class="cube",
        annotations=(("agc.cloud.tencent.com/cube-template-mode", "auto"), ("x", 'a"b: c')),
        readiness_probe_command=("cat", "/tmp/ready"),
        cpu_limit="1",
    )
    (p,) = render_batch(w, size=1, namespace="n", node_name="nd", run_id="r", round_tag="t")
    assert p.body["spec"]["runtimeClassName"] == "cube"
    assert p.body["metadata"]["annotations"] == {
        "agc.cloud.tencent.com/cube-template-mode": "auto", "x": 'a"b: c',
    }  # fmt: skip
    c = p.body["spec"]["containers"][0]
    assert c["readinessProbe"]["exec"]["command"] == ["cat", "/tmp/ready"]
    assert c["resources"]["limits"]["cpu"] == "1"


def test_custom_template_strict_and_labels_enforced(tmp_path: Path) -> None:
    good = tmp_path / "pod.yaml.j2"
    good.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: other\n  labels: {team: x}\n"
        "spec:\n  containers: [{name: c, image: {{ image | tojson }}}]\n"
    )
    (p,) = render_batch(
        Workload(template=str(good)), size=1, namespace="n", node_name="nd", run_id="r",
        round_tag="t",
    )  # fmt: skip
    assert p.body["metadata"]["name"] == "abt-t-0000"  # the tool's name and labels win
    assert p.body["metadata"]["labels"]["team"] == "x"
    assert p.body["metadata"]["labels"][ROUND_LABEL] == "t"
    bad = tmp_path / "bad.yaml.j2"
    bad.write_text("kind: Pod\nmetadata: {name: {{ no_such_variable }}}\n")
    with pytest.raises(ConfigError, match="unknown variable"):
        render_batch(
            Workload(template=str(bad)), size=1, namespace="n", node_name="nd", run_id="r",
            round_tag="t",
        )  # fmt: skip
    with pytest.raises(ConfigError, match="not found"):
        render_batch(
            Workload(template=str(tmp_path / "missing.j2")), size=1, namespace="n",
            node_name="nd", run_id="r", round_tag="t",
        )  # fmt: skip


# --- kubelet metrics -----------------------------------------------------------------------------

TEXT_BEFORE = """\
# HELP kubelet_pod_start_sli_duration_seconds [BETA] Duration in seconds to start a pod
# TYPE kubelet_pod_start_sli_duration_seconds histogram
kubelet_pod_start_sli_duration_seconds_bucket{le="0.5"} 1
kubelet_pod_start_sli_duration_seconds_bucket{le="+Inf"} 3
kubelet_pod_start_sli_duration_seconds_sum 4.5
kubelet_pod_start_sli_duration_seconds_count 3
kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"} 2
kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"} 4
kubelet_runtime_operations_total{operation_type="run_podsandbox"} 4
kubelet_pleg_relist_duration_seconds_sum 1.0
kubelet_pleg_relist_duration_seconds_count 100
unrelated_metric{a="b"} 7
"""
TEXT_AFTER = """\
kubelet_pod_start_sli_duration_seconds_sum 10.5
kubelet_pod_start_sli_duration_seconds_count 6
kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"} 5
kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"} 7
kubelet_runtime_operations_duration_seconds_sum{operation_type="start_container"} 0.3
kubelet_runtime_operations_duration_seconds_count{operation_type="start_container"} 3
kubelet_runtime_operations_total{operation_type="run_podsandbox"} 7
kubelet_pleg_relist_duration_seconds_sum 1.0
kubelet_pleg_relist_duration_seconds_count 100
kubelet_run_podsandbox_duration_seconds_sum{runtime_handler=""} 0.25 1700000000000
kubelet_run_podsandbox_duration_seconds_count{runtime_handler=""} 2 1700000000000
"""


def test_parse_and_deltas() -> None:
    before, after = metrics.parse(TEXT_BEFORE), metrics.parse(TEXT_AFTER)
    assert before[("kubelet_pod_start_sli_duration_seconds", "")] == (4.5, 3)
    run = 'operation_type="run_podsandbox"'
    assert before[("kubelet_runtime_operations_total", run)] == (None, 4)
    assert not any(k[0] == "unrelated_metric" for k in before)
    d = {(m.metric, m.labels): m for m in metrics.deltas(before, after)}
    sli = d[("kubelet_pod_start_sli_duration_seconds", "")]
    assert (sli.delta_sum, sli.delta_count) == (6.0, 3)
    assert d[("kubelet_runtime_operations_duration_seconds", run)].delta_sum == 3
    new = d[("kubelet_runtime_operations_duration_seconds", 'operation_type="start_container"')]
    assert (new.delta_sum, new.delta_count) == (0.3, 3)  # a series new in "after" counts from 0
    assert d[("kubelet_runtime_operations_total", run)].delta_sum is None
    assert d[("kubelet_run_podsandbox_duration_seconds", 'runtime_handler=""')].delta_count == 2
    assert ("kubelet_pleg_relist_duration_seconds", "") not in d  # no change -> not kept
    kept = metrics.deltas(before, after, keep_zero=True)
    assert any(m.metric == "kubelet_pleg_relist_duration_seconds" for m in kept)


def test_counter_reset_counts_from_zero() -> None:
    before = metrics.parse("kubelet_started_pods_total 50\n")
    after = metrics.parse("kubelet_started_pods_total 4\n")
    (m,) = metrics.deltas(before, after)
    assert m.delta_count == 4


def test_labels_with_escapes_commas_and_order() -> None:
    labels = metrics.parse_labels(r'{b="x,y", a="say \"hi\"",c=""}')
    assert labels == {"a": r"say \"hi\"", "b": "x,y", "c": ""}
    assert metrics.canonical(labels) == r'a="say \"hi\"",b="x,y",c=""'
    parsed = metrics.parse(
        'kubelet_pod_worker_duration_seconds_sum{operation_type="sync",z="1"} +Inf\n'
        'kubelet_pod_worker_duration_seconds_count{z="1",operation_type="sync"} 2\n'
    )
    ((key, (s, c)),) = parsed.items()
    assert key == ("kubelet_pod_worker_duration_seconds", 'operation_type="sync",z="1"')
    assert math.isinf(s or 0) and c == 2


def test_malformed_metrics_raise() -> None:
    with pytest.raises(metrics.MetricsParseError):
        metrics.parse("this is { not a sample\n")
    with pytest.raises(metrics.MetricsParseError):
        metrics.parse_labels('{a="unterminated}')


def test_the_kubelets_api_round_trip_is_kept_per_verb() -> None:
    """client-go's request histogram (issue 45): a round keeps its delta per verb, so a report
    shows the mean PATCH and GET the kubelet saw (e.g. through `lab up --api-latency`)."""
    family = "rest_client_request_duration_seconds"
    line = family + '_{0}{{host="127.0.0.1:6444",verb="{1}"}} {2}\n'
    before = metrics.parse(line.format("sum", "PATCH", 1.0) + line.format("count", "PATCH", 10))
    after = metrics.parse(
        line.format("sum", "PATCH", 4.0)
        + line.format("count", "PATCH", 70)
        + line.format("sum", "GET", 0.6)
        + line.format("count", "GET", 11)
        + line.format("bucket", "PATCH", 3).replace('"}', '",le="0.05"}')
    )
    d = {m.labels: m for m in metrics.deltas(before, after) if m.metric == family}
    patch = d['host="127.0.0.1:6444",verb="PATCH"']
    assert (patch.delta_sum, patch.delta_count) == (3.0, 60)  # 50 ms a PATCH
    assert d['host="127.0.0.1:6444",verb="GET"'].delta_count == 11
    assert tables_reference.stage_label(f'{family}{{verb="PATCH"}}') == (
        'kubelet API request round trip (rest_client_request_duration{verb="PATCH"})'
    )
