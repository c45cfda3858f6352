"""`abtest history` output: Markdown, HTML with a plot of the series and its change points,
and JSON. Renders a :class:`~abtest.app.history.History`; computes nothing."""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abtest.config.paths import write_output

if TYPE_CHECKING:  # the type only: a renderer never calls the use case
    from abtest.app.history import History

FORMATS = ("md", "html", "json")


def _interval(low: float | None, high: float | None, fmt: str = "{:.3f}") -> str:
    if low is None or high is None:
        return "n/a (one round)"
    return f"[{fmt.format(low)}, {fmt.format(high)}]"


def _step(cp: Any) -> str:
    ci = (
        f"[{cp.step_low:+.1f} %, {cp.step_high:+.1f} %]"
        if cp.step_low is not None and cp.step_high is not None
        else "(no interval: one run on a side)"
    )
    return f"{cp.step_pct:+.1f} % {ci}"


def _status(cp: Any) -> str:
    """'' for a confirmed change point; why an unconfirmed one is not (yet) a change."""
    if cp.confirmed:
        return ""
    return f" (unconfirmed: the new level is only the last {cp.runs_after} run(s); 3 confirm it)"


def _alarm_scope(h: History) -> str:
    scope = f"confirmed within the last {h.fail_on_new} runs"
    return scope + (" (or unconfirmed in them)" if h.alarm_unconfirmed else "")


def _changed(changed: dict[str, list[Any]]) -> str:
    if not changed:
        return "nothing the runs stored (kubelet, config, gates, runtime, controller) differs"
    return "; ".join(f"{k}: {b} -> {a}" for k, (b, a) in sorted(changed.items()))


def to_dict(h: History) -> dict[str, Any]:
    return {
        "node": h.node,
        "arm": h.arm,
        "size": h.size,
        "metric": h.metric,
        "detector": {"name": "apache-otava", "max_pvalue": h.max_pvalue},
        "runs": [asdict(f) for f in h.figures],
        "change_points": [
            asdict(cp) | {"slower": cp.slower, "changed": ch}
            for cp, ch in zip(h.change_points, h.changed, strict=True)
        ],
        "fail_on_new": h.fail_on_new,
        "alarm_unconfirmed": h.alarm_unconfirmed,
        "alarms": [cp.run_id for cp in h.alarms],
    }


def markdown(h: History) -> str:
    title = f"# History of {h.metric} on {h.node}: arm {h.arm}, {h.size} pods"
    lines = [
        title,
        "",
        f"{len(h.figures)} runs; per run the geometric mean of its accepted rounds with a 95 % "
        f"interval. Change points by Apache Otava (max p-value {h.max_pvalue}).",
        "",
        "| # | run | date | rounds | figure (s) | interval (s) |",
        "|---|---|---|---|---|---|",
    ]
    marks = {cp.index for cp in h.change_points}
    for i, f in enumerate(h.figures):
        mark = " **change**" if i in marks else ""
        lines.append(
            f"| {i + 1} | {f.run_id}{mark} | {f.created_at[:19]} | {f.rounds} | {f.value:.3f} | "
            f"{_interval(f.low, f.high)} |"
        )
    lines += ["", "## Change points", ""]
    if not h.change_points:
        lines.append("None found.")
    for cp, ch in zip(h.change_points, h.changed, strict=True):
        direction = "slower" if cp.slower else "faster"
        lines += [
            f"- run {cp.index + 1} `{cp.run_id}` ({cp.created_at[:19]}): {direction}, "
            f"{cp.before:.3f} s -> {cp.after:.3f} s, step {_step(cp)}, p = {cp.pvalue:.2g}"
            f"{_status(cp)}",
            f"  - what changed from the run before: {_changed(ch)}",
        ]
    if h.fail_on_new is not None:
        lines += [""]
        if h.alarms:
            runs = ", ".join(cp.run_id for cp in h.alarms)
            lines.append(f"**ALARM**: slower change point {_alarm_scope(h)}: {runs}")
        else:
            lines.append(f"No slower change point {_alarm_scope(h)}.")
    return "\n".join(lines) + "\n"


def plot_png(h: History) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    xs = list(range(1, len(h.figures) + 1))
    ys = [f.value for f in h.figures]
    lows = [f.value - (f.low if f.low is not None else f.value) for f in h.figures]
    highs = [(f.high if f.high is not None else f.value) - f.value for f in h.figures]
    ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o-", capsize=3, label="run (95 % interval)")
    edges = [0, *(cp.index for cp in h.change_points), len(ys)]
    for k in range(len(edges) - 1):
        seg = h.figures[edges[k] : edges[k + 1]]
        level = [cp.before for cp in h.change_points[k : k + 1]] or [
            cp.after for cp in h.change_points[k - 1 : k]
        ]
        if level:
            ax.hlines(level[0], edges[k] + 0.6, edges[k] + len(seg) + 0.4, colors="grey")
    for cp in h.change_points:
        colour = "red" if cp.slower else "green"
        ax.axvline(cp.index + 0.5, color=colour, linestyle="--")
        ax.annotate(f"{cp.step_pct:+.1f} %", (cp.index + 0.55, max(ys)), color=colour)
    ax.set_xlabel("run (in time order)")
    ax.set_ylabel(f"{h.metric} (s)")
    ax.set_title(f"{h.node}: {h.arm}, {h.size} pods")
    ax.legend(loc="lower right")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def html_page(h: History, png: bytes) -> str:
    e = html.escape
    marks = {cp.index for cp in h.change_points}
    rows = "".join(
        f"<tr{' class=change' if i in marks else ''}><td>{i + 1}</td><td>{e(f.run_id)}</td>"
        f"<td>{e(f.created_at[:19])}</td><td>{f.rounds}</td><td>{f.value:.3f}</td>"
        f"<td>{e(_interval(f.low, f.high))}</td></tr>"
        for i, f in enumerate(h.figures)
    )
    points = (
        "".join(
            f"<li>run {cp.index + 1} <code>{e(cp.run_id)}</code> ({e(cp.created_at[:19])}): "
            f"{'slower' if cp.slower else 'faster'}, {cp.before:.3f} s &rarr; {cp.after:.3f} s, "
            f"step {e(_step(cp))}, p = {cp.pvalue:.2g}{e(_status(cp))}"
            f"<br>what changed: {e(_changed(ch))}</li>"
            for cp, ch in zip(h.change_points, h.changed, strict=True)
        )
        or "<li>None found.</li>"
    )
    alarm = ""
    if h.fail_on_new is not None:
        alarm = (
            f"<p><strong>ALARM</strong>: slower change point {e(_alarm_scope(h))}: "
            f"{e(', '.join(cp.run_id for cp in h.alarms))}</p>"
            if h.alarms
            else f"<p>No slower change point {e(_alarm_scope(h))}.</p>"
        )
    image = base64.b64encode(png).decode()
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{e(h.node)} history</title><style>body{{font-family:sans-serif}}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        "tr.change{background:#fee}</style></head><body>"
        f"<h1>History of {e(h.metric)} on {e(h.node)}: arm {e(h.arm)}, {h.size} pods</h1>"
        f"<img alt='series and change points' src='data:image/png;base64,{image}'>"
        f"<p>Change points by Apache Otava (max p-value {h.max_pvalue}); per run the geometric "
        "mean of its accepted rounds with a 95 % interval.</p>"
        "<table><tr><th>#</th><th>run</th><th>date</th><th>rounds</th><th>figure (s)</th>"
        f"<th>interval (s)</th></tr>{rows}</table><h2>Change points</h2><ul>{points}</ul>"
        f"{alarm}</body></html>\n"
    )


def write(
    h: History, out_dir: Path, formats: tuple[str, ...] = FORMATS, flag: str = "--out"
) -> list[Path]:
    """The history's files in ``out_dir``, each replacing only a regular file, atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if "md" in formats:
        written.append(write_output(out_dir / "history.md", markdown(h), flag))
    if "json" in formats:
        text = json.dumps(to_dict(h), indent=2, sort_keys=True)
        written.append(write_output(out_dir / "history.json", text, flag))
    if "html" in formats:
        png = plot_png(h)
        write_output(out_dir / "history.png", png, flag)
        written.append(write_output(out_dir / "history.html", html_page(h, png), flag))
    return written
