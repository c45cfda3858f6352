"""JUnit XML for a sweep: one test case per comparison (arm vs baseline, size, metric).

A case passes when its saving interval excludes 0 (the run shows an effect, either way: the
saving's sign is in the message), fails when the interval includes 0 (no effect shown at this
level; the message gives the interval's bounds, which are what the data rule out), and is
skipped when no interval could be made (too few pairs, no variation) with the reason. CI
systems then list every gate with a verdict.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from abtest.analysis.report_model import ReportModel

if TYPE_CHECKING:  # the types the model holds; the renderers call no statistics
    from abtest.stats import Comparison


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def case_name(c: Comparison) -> str:
    return f"{c.arm} vs {c.baseline}, {c.size} pods, {c.metric}"


def verdict(c: Comparison) -> tuple[str, str]:
    """("passed" | "failure" | "skipped", one-line message)."""
    level = f"{c.confidence:.0%}"
    if c.savings_ci is None or not all(math.isfinite(x) for x in c.savings_ci):
        why = c.savings_note or c.note or "too few comparable rounds"
        return "skipped", f"no {level} interval: {why}"
    low, high = c.savings_ci
    text = (
        f"saving {_fmt(c.savings_s)} s [{_fmt(low)}, {_fmt(high)}] ({level}), "
        f"reduction {_fmt(c.pct_reduction, 1)} %, p Holm {_fmt(c.p_adjusted, 3)}"
    )
    if low > 0 or high < 0:
        direction = "faster" if low > 0 else "slower"
        return "passed", f"saving interval excludes 0: {c.arm} is {direction}; {text}"
    return "failure", f"saving interval includes 0: no effect shown; {text}"


def render_junit(model: ReportModel) -> str:
    """The report's comparisons as a JUnit testsuite named after the run."""
    cases = [(c, *verdict(c)) for c in model.comparisons]
    suite = ET.Element(
        "testsuite",
        name=f"abtest run {model.run_id}",
        tests=str(len(cases)),
        failures=str(sum(1 for _, kind, _ in cases if kind == "failure")),
        skipped=str(sum(1 for _, kind, _ in cases if kind == "skipped")),
        errors="0",
    )
    for c, kind, message in cases:
        case = ET.SubElement(
            suite, "testcase", classname=f"abtest.{model.run_id}.{c.metric}", name=case_name(c)
        )
        if kind == "failure":
            ET.SubElement(case, "failure", message=message, type="NoEffectShown").text = message
        elif kind == "skipped":
            ET.SubElement(case, "skipped", message=message)
        else:
            ET.SubElement(case, "system-out").text = message
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
