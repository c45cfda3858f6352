"""A bisection rendered: the conclusion, each build's time with its interval along the range,
and the verdict at each step (Markdown, HTML, JSON; the command's closing lines)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

from abtest.analysis.bisect import BisectModel, BuildTime, StepRecord
from abtest.config.paths import write_output
from abtest.errors import UserError
from abtest.report.render import md_cell

#: exit codes of `abtest bisect`: a culprit named, or none
EXIT = {"CULPRIT": 0, "NOT_CONFIRMED": 3, "SPREAD": 3, "UNRESOLVED": 3, "UNFINISHED": 3}
METRIC_NAMES = {"batch_ready_s": "batch ready time", "p95_s": "P95 pod latency"}


def exit_code(model: BisectModel) -> int:
    return EXIT[model.conclusion.verdict]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def summary_lines(model: BisectModel) -> list[str]:
    """The command's closing lines: the verdict, what it rests on, what it cost."""
    c = model.conclusion
    head = f"bisection {model.root}: {c.verdict}"
    if c.culprit:
        head += f": first bad build {c.culprit}"
    return [
        head,
        c.message,
        f"{len(model.steps)} measurement(s), {model.blocks} blocks, node time "
        f"{_minutes(model.wall_s)} ({model.size} pods, {_metric(model)})",
        f"report: abtest report {model.root}",
    ]


def _metric(model: BisectModel) -> str:
    return METRIC_NAMES.get(model.metric, model.metric)


def _time_cell(t: BuildTime) -> str:
    if t.lo_s is None or t.hi_s is None:
        return f"{t.mean_s:.3f} s (n={t.n}, no interval)"
    return f"{t.mean_s:.3f} s [{t.lo_s:.3f}, {t.hi_s:.3f}] (n={t.n})"


def _role(model: BisectModel, build: str) -> str:
    if build == model.builds[0]:
        return "good end"
    if build == model.builds[-1]:
        return "bad end"
    if build == model.conclusion.culprit:
        return "**first bad**"
    return ""


def _step_row(s: StepRecord) -> list[str]:
    what = "ends" if s.index == 0 else f"step {s.index}"
    builds = " / ".join(s.builds)
    spans = "; ".join(f"{name} {span.text()}" for name, span in s.spans)
    return [what, builds, s.outcome, spans, str(s.blocks), _minutes(s.wall_s), s.run_id]


def render_markdown(model: BisectModel) -> str:
    metric = _metric(model)
    times = {t.build: t for t in model.times}
    lines = [
        f"# Bisection {model.root}",
        "",
        *[f"{line}  " for line in summary_lines(model)[:3]],
        "",
        f"## Each build's {metric} ({model.size} pods, mean and 95 % interval over its rounds)",
        "",
        "| # | build | time | |",
        "|---|---|---|---|",
    ]
    for i, build in enumerate(model.builds):
        t = times.get(build)
        cell = _time_cell(t) if t else "not measured"
        lines.append(f"| {i} | {md_cell(build)} | {cell} | {_role(model, build)} |")
    lines += [
        "",
        "## Steps",
        "",
        "The ends: the regression gate (bad against good, margin "
        f"{model.margin_pct:g} %). A step: the middle build against the two ends it lies "
        "between; BAD when only `mid vs low` is slower (its interval above 0), GOOD when only "
        "`high vs mid` is. Intervals at each look's Bonferroni level.",
        "",
        "| | builds | verdict | slowdowns | blocks | node time | run |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(md_cell(c) for c in _step_row(s)) + " |" for s in model.steps]
    return "\n".join(lines) + "\n"


def render_html(model: BisectModel) -> str:
    e = html.escape
    times = {t.build: t for t in model.times}
    rows = "".join(
        f"<tr><td>{i}</td><td>{e(b)}</td>"
        f"<td>{e(_time_cell(times[b]) if b in times else 'not measured')}</td>"
        f"<td>{e(_role(model, b).strip('*'))}</td></tr>"
        for i, b in enumerate(model.builds)
    )
    steps = "".join(
        "<tr>" + "".join(f"<td>{e(c)}</td>" for c in _step_row(s)) + "</tr>" for s in model.steps
    )
    summary = "".join(f"<p>{e(line)}</p>" for line in summary_lines(model)[:3])
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Bisection {e(model.root)}</title></head><body>"
        f"<h1>Bisection {e(model.root)}</h1>{summary}"
        f"<h2>Each build ({model.size} pods, mean and 95 % interval)</h2>"
        f"<table><tr><th>#</th><th>build</th><th>time</th><th></th></tr>{rows}</table>"
        "<h2>Steps</h2><table><tr><th></th><th>builds</th><th>verdict</th><th>slowdowns</th>"
        f"<th>blocks</th><th>node time</th><th>run</th></tr>{steps}</table></body></html>\n"
    )


def write_bisect_report(
    model: BisectModel, out_dir: Path, formats: Sequence[str], flag: str = "--out"
) -> list[Path]:
    """report.md / report.html / report.json of a bisection (other formats have no bisection
    form and are skipped)."""
    if not {"md", "html", "json"} & set(formats):
        raise UserError(
            f"a bisection has no {', '.join(formats)} form", "--format", "use md, html or json"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in formats:
        if name == "md":
            written.append(write_output(out_dir / "report.md", render_markdown(model), flag))
        elif name == "html":
            written.append(write_output(out_dir / "report.html", render_html(model), flag))
        elif name == "json":
            text = json.dumps(model.to_dict(), indent=2, default=str) + "\n"
            written.append(write_output(out_dir / "report.json", text, flag))
    return written
