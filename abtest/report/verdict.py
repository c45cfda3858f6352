"""The regression gate's outputs for machines and people: JUnit XML and a Markdown summary.

JUnit: one testcase per (size, metric); FAIL is a <failure>, INCONCLUSIVE a <skipped> (the
pipeline acts on the exit code, 3; a skipped case keeps the test report honest without
calling it a pass). The numbers are in the message so a CI page shows them as they are.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from abtest.errors import NO_VARIATION

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats import Decision
    from abtest.stats.regress_result import RegressResult


METRIC_NAMES = {
    "batch_ready_s": "batch ready time",
    "p50_s": "P50 pod start-up",
    "p95_s": "P95 pod start-up",
    "p99_s": "P99 pod start-up",
}


def _ci(d: Decision) -> str:
    if d.slowdown_ci is None:
        # The real reason, from stats: too few rounds or pairs, or no variation at all.
        if NO_VARIATION in d.note:
            return "no interval (no variation between rounds)"
        return f"no interval ({d.note or 'n too small'})"
    lo, hi = d.slowdown_ci
    return f"[{lo:+.1f} %, {hi:+.1f} %]"


def _family(result: RegressResult) -> int:
    return max((d.decisions for d in result.decisions), default=len(result.decisions))


def _rounds_used(d: Decision) -> str:
    """Which rounds the means beside the interval come from (the interval's own)."""
    if d.method == "paired":
        return f"{d.n_pairs} complete blocks"
    return f"{d.n_reference}/{d.n_candidate} rounds"


def _all_rounds(d: Decision) -> str:
    """The all-rounds arithmetic means, labelled, only where they could be mistaken (unbalanced)."""
    if d.method != "paired" or (d.n_reference == d.n_pairs and d.n_candidate == d.n_pairs):
        return ""
    return (
        f"; all rounds (not the interval's): candidate {d.candidate_mean:.3f} s vs reference "
        f"{d.reference_mean:.3f} s, arithmetic means"
    )


def _sensitivity(d: Decision) -> str:
    """The look's MDE, worded as what it is: the run's sensitivity, not a bound."""
    return f"could detect {d.mde_pct:.1f} % (80 % power)" if math.isfinite(d.mde_pct) else "-"


def to_settle(d: Decision) -> str:
    """What more would settle an INCONCLUSIVE decision ("" for a decided one)."""
    if d.verdict != "INCONCLUSIVE":
        return ""
    if d.settle_blocks is not None:
        return (
            f"; to settle it: about {d.settle_blocks} complete blocks in all at this level, if "
            f"the slowdown stays near {d.slowdown_pct:+.1f} % (`abtest regress --plan` plans "
            "a gate that can)"
        )
    if d.slowdown_ci is not None and d.method == "paired":
        return (
            f"; the slowdown is at the margin ({d.slowdown_pct:+.1f} % against "
            f"{d.margin_pct:g} %): more blocks do not settle that, a margin chosen for the "
            "release would"
        )
    return "; to settle it: paired blocks with an interval (see the note)"


def describe(d: Decision) -> str:
    name = METRIC_NAMES.get(d.metric, d.metric)
    sensitivity = f"; this look {_sensitivity(d)}" if math.isfinite(d.mde_pct) else ""
    return (
        f"{d.verdict}: {name} at {d.size} pods: candidate {d.candidate_gm:.3f} s vs reference "
        f"{d.reference_gm:.3f} s (geometric means, {_rounds_used(d)}), slowdown "
        f"{d.slowdown_pct:+.1f} % {d.look_confidence * 100:.1f} % CI {_ci(d)}, margin "
        f"{d.margin_pct:g} %{sensitivity} (n {d.n_reference}/{d.n_candidate}, "
        f"{d.method}{_all_rounds(d)}){to_settle(d)}"
    )


def junit_xml(result: RegressResult) -> str:
    suite = ET.Element(
        "testsuite",
        name="abtest regress",
        tests=str(len(result.decisions)),
        failures=str(sum(d.verdict == "FAIL" for d in result.decisions)),
        errors="0",
        skipped=str(sum(d.verdict == "INCONCLUSIVE" for d in result.decisions)),
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("source", result.source),
        ("verdict", result.verdict),
        ("looks", f"{result.looks}/{result.max_looks}"),
    ):
        ET.SubElement(props, "property", name=key, value=value)
    for d in result.decisions:
        case = ET.SubElement(
            suite, "testcase", classname="abtest.regress", name=f"{d.metric} @ {d.size} pods"
        )
        if d.verdict == "FAIL":
            ET.SubElement(case, "failure", message=describe(d), type="regression").text = describe(
                d
            )
        elif d.verdict == "INCONCLUSIVE":
            ET.SubElement(case, "skipped", message=describe(d))
        ET.SubElement(case, "system-out").text = describe(d)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown_summary(result: RegressResult) -> str:
    icon = {"PASS": "✅", "FAIL": "❌", "INCONCLUSIVE": "⚠️"}
    lines = [
        f"## abtest regress: {icon[result.verdict]} {result.verdict}",
        "",
        f"Source: {result.source}. Looks: {result.looks} of at most {result.max_looks} "
        f"({result.blocks} blocks). Slowdown = (candidate - reference) / reference; "
        f"intervals are Bonferroni-adjusted across the {result.max_looks} look(s) and the "
        f"{_family(result)} decision(s), so the overall verdict is wrong (FAIL or PASS) at "
        "most (1 - confidence) / 2 of the time in each direction.",
        "",
        "Reference and candidate are geometric means over the rounds the interval used "
        "(complete blocks when paired), so candidate / reference - 1 is the slowdown. "
        "The CI's bounds are what the data rule out; 'could detect' is the look's sensitivity "
        "(the change it would have shown 80 % of the time), not a bound on the slowdown.",
        "",
        "| size | metric | reference (s) | candidate (s) | slowdown | CI | could detect | "
        "margin | verdict |",
        "|---:|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for d in result.decisions:
        lines.append(
            f"| {d.size} | {METRIC_NAMES.get(d.metric, d.metric)} | {d.reference_gm:.3f} | "
            f"{d.candidate_gm:.3f} | {d.slowdown_pct:+.1f} % | {_ci(d)} | "
            f"{_sensitivity(d).removeprefix('could detect ').removesuffix(' (80 % power)')} | "
            f"{d.margin_pct:g} % | {icon[d.verdict]} {d.verdict} |"
        )
    unsettled = [d for d in result.decisions if d.verdict == "INCONCLUSIVE"]
    if unsettled:
        lines += ["", "What more would settle the INCONCLUSIVE decisions:", ""]
        lines += [
            f"- {METRIC_NAMES.get(d.metric, d.metric)} at {d.size} pods"
            f"{to_settle(d).replace('; ', ': ', 1)}"
            for d in unsettled
        ]
    return "\n".join(lines) + "\n"
