"""A round whose pods cannot all be scheduled at once is refused by the pre-flight, before the
kubelet is touched (found on the lab: 50 pods x 100m on a 2-CPU node waited out the timeout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.config import datafiles
from abtest.config.playbook import load_playbook
from abtest.config.quantities import parse_quantity
from abtest.engine.round_fit import round_fit_problems

LAB = {"cpu": "2", "memory": "24581684Ki", "pods": "250"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("100m", 0.1), ("2", 2.0), ("1.5", 1.5), ("128Mi", 128 * 2**20),
     ("24581684Ki", 24581684 * 1024), ("1G", 1e9), ("250", 250.0), ("500u", 5e-4)],
)  # fmt: skip
def test_quantities_read_as_kubernetes_writes_them(text: str, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "1e3", "-1", "abc", "1.5.2", "10Xi"])
def test_a_form_it_does_not_read_is_none_not_a_guess(text: str) -> None:
    assert parse_quantity(text) is None


def test_fifty_pods_of_100m_do_not_fit_two_cpus_and_the_message_says_how_many_would() -> None:
    (problem,) = round_fit_problems(50, {"cpu": "100m", "memory": "1Mi"}, LAB)
    assert "50 x 100m = 5 CPU" in problem and "allocatable 2 CPU" in problem
    assert "at most 20 of them" in problem and "workload.requests.cpu" in problem


def test_rounds_that_fit_and_quantities_it_cannot_read_raise_nothing() -> None:
    assert round_fit_problems(20, {"cpu": "100m", "memory": "1Mi"}, LAB) == []
    assert round_fit_problems(150, {"cpu": "10m", "memory": "1Mi"}, LAB) == []
    assert round_fit_problems(50, {"cpu": "1e2m"}, LAB) == []
    assert round_fit_problems(50, {"cpu": "100m"}, {}) == []


def test_more_pods_than_max_pods_and_more_memory_than_the_node_has() -> None:
    problems = round_fit_problems(300, {"memory": "128Mi"}, {"pods": "250", "memory": "16Gi"})
    assert len(problems) == 2
    assert "250 allocatable pods" in problems[0]
    assert "38400 MiB" in problems[1] and "16384 MiB" in problems[1]


LAB_PLAYBOOKS = sorted(
    p
    for p in datafiles.data_dir("playbooks").glob("*.yaml")
    if load_playbook(str(p)).profile == "nodes/lab.yaml"
)


@pytest.mark.parametrize("path", LAB_PLAYBOOKS, ids=lambda p: p.stem)
def test_every_lab_playbook_fits_its_largest_round_on_the_two_cpu_lab_node(path: Path) -> None:
    # lab-bisect shipped with the default 100m request and 150 pods: the pre-flight refused
    # its first 150-pod bisection on the lab (20 would have fit)
    book = load_playbook(str(path))
    requests = {"cpu": book.workload.cpu_request}
    assert round_fit_problems(max(book.sizes), requests, LAB) == []
