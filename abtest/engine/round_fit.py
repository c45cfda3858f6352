"""Whether a round's pods can all be scheduled on the node at once: their requests against the
node's allocatable. A round that cannot would wait for its timeout and fail every arm alike,
after the kubelet was already reconfigured; the pre-flight says so before anything changes."""

from __future__ import annotations

import math
from collections.abc import Mapping

from abtest.config.quantities import parse_quantity


def _show(resource: str, value: float) -> str:
    if resource == "cpu":
        return f"{value:g} CPU"
    return f"{value / 2**20:.0f} MiB"


def round_fit_problems(
    pods: int, requests: Mapping[str, str], allocatable: Mapping[str, str]
) -> list[str]:
    """One line per resource the largest round (``pods`` pods, each requesting ``requests``)
    needs more of than the node's ``allocatable``; other pods' requests come on top."""
    problems: list[str] = []
    have_pods = parse_quantity(allocatable.get("pods", ""))
    if have_pods is not None and pods > have_pods:
        problems.append(
            f"a round of {pods} pods is more than the node's {have_pods:g} allocatable pods "
            "(the kubelet's maxPods): lower the batch size"
        )
    for resource, per_pod_text in requests.items():
        per_pod = parse_quantity(per_pod_text)
        have = parse_quantity(allocatable.get(resource, ""))
        if per_pod is None or have is None or pods * per_pod <= have:
            continue
        # 2 // 0.1 is 19.0 in binary floating point
        fit = math.floor(have / per_pod + 1e-9) if per_pod else pods
        problems.append(
            f"a round of {pods} pods requests {pods} x {per_pod_text} = "
            f"{_show(resource, pods * per_pod)}, more than the node's allocatable "
            f"{_show(resource, have)}: at most {fit} of them could be scheduled; lower the "
            f"playbook's workload.requests.{resource} or the batch size"
        )
    return problems
