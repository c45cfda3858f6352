"""The report's figures: matplotlib (Agg, no pyplot state, no network) to inline SVG strings.

- per-size distribution of batch ready times per arm (box + every round as a point);
- percent reduction of batch ready time vs baseline with the stats intervals as whiskers;
- per-pod latency CDFs, baseline vs the combined arm (every arm when there is no combined).

Each SVG is stripped of its XML prolog, DOCTYPE, metadata and namespace URLs, so the HTML that
embeds it references nothing outside itself. Ids are salted per figure so that several figures
in one page never share an id.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from abtest.analysis.report_model import ReportModel
from abtest.report.fmt import level

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

PALETTE = (
    "#4c72b0",
    "#dd8452",
    "#55a868",
    "#c44e52",
    "#8172b3",
    "#937860",
    "#da8bc3",
    "#8c8c8c",
    "#ccb974",
    "#64b5cd",
)
BASELINE_COLOR = "#333333"
MAX_CDF_ARMS = 8


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    caption: str
    svg: str


def render_figures(model: ReportModel) -> tuple[Figure, ...]:
    """Every figure the model has data for, in report order."""
    builders: list[tuple[str, str, Callable[[ReportModel], tuple[MplFigure, str] | None]]] = [
        ("batch-ready-distribution", "Batch ready time per arm and size", _distribution),
        ("reduction-ci", "Percent reduction vs baseline", _reduction),
        ("latency-cdf", "Per-pod latency CDF", _cdf),
    ]
    out = []
    for key, title, build in builders:
        built = build(model)
        if built is not None:
            figure, caption = built
            out.append(Figure(key, title, caption, to_svg(figure, key)))
    return tuple(out)


def to_svg(figure: MplFigure, salt: str) -> str:
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return _clean_svg(buffer.getvalue(), salt)


def _clean_svg(svg: str, prefix: str) -> str:
    """Drop what an inline SVG must not carry; prefix every id (and every reference to one)
    with ``prefix``, so ids stay unique when several figures share one page."""
    svg = re.sub(r"<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r"<!DOCTYPE[^>]*>\s*", "", svg, flags=re.S)
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r'\bhref="#([^"]+)"', rf'href="#{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return svg.strip()


def _colors(model: ReportModel) -> dict[str, str]:
    colors = {}
    others = [a for a in model.arm_names() if a != model.baseline]
    for i, arm in enumerate(others):
        colors[arm] = PALETTE[i % len(PALETTE)]
    if model.baseline is not None:
        colors[model.baseline] = BASELINE_COLOR
    return colors


def _new_figure(width: float, height: float) -> MplFigure:
    # matplotlib is imported when a figure is drawn, not with the report package: analyze and
    # `report --format json/csv` draw none and start a second sooner without it.
    import matplotlib
    from matplotlib.figure import Figure as MplFigure

    matplotlib.use("Agg")
    figure = MplFigure(figsize=(width, height), layout="constrained")
    figure.set_facecolor("white")
    return figure


def _style(ax: Axes) -> None:
    ax.grid(True, axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _distribution(model: ReportModel) -> tuple[MplFigure, str] | None:
    rounds = model.rounds[model.rounds["included"] & model.rounds["batch_ready_s"].notna()]
    if rounds.empty:
        return None
    arms = [a for a in model.arm_names() if (rounds["arm"] == a).any()]
    sizes = [s for s in model.sizes if (rounds["size"] == s).any()]
    colors = _colors(model)
    width = min(4.2 * len(sizes), 13.0)
    figure = _new_figure(width, 3.6)
    axes = figure.subplots(1, len(sizes), squeeze=False)[0]
    for ax, size in zip(axes, sizes, strict=True):
        data = [
            rounds.loc[(rounds["arm"] == a) & (rounds["size"] == size), "batch_ready_s"]
            .astype(float)
            .to_numpy()
            for a in arms
        ]
        positions = [i for i, d in enumerate(data) if d.size]
        ax.boxplot(
            [data[i] for i in positions],
            positions=positions,
            widths=0.55,
            showfliers=False,
            medianprops={"color": "#222222"},
            boxprops={"color": "#888888"},
            whiskerprops={"color": "#888888"},
            capprops={"color": "#888888"},
        )
        for i in positions:
            values = data[i]
            # Evenly spread points (deterministic), so every round is visible.
            offsets = np.linspace(-0.16, 0.16, values.size) if values.size > 1 else np.zeros(1)
            ax.scatter(
                i + offsets,
                values,
                s=22,
                color=colors.get(arms[i], PALETTE[0]),
                alpha=0.85,
                zorder=3,
                edgecolors="white",
                linewidths=0.5,
            )
        ax.set_xticks(range(len(arms)), arms, rotation=30 if len(arms) > 3 else 0, ha="right")
        if len(arms) <= 3:
            for label in ax.get_xticklabels():
                label.set_horizontalalignment("center")
        ax.set_title(f"{size} pods", fontsize=10)
        ax.set_ylabel("batch ready time (s)")
        _style(ax)
    caption = (
        "Every analysed round as a point; boxes show quartiles and median of the rounds. "
        "Lower is faster."
    )
    return figure, caption


def _reduction(model: ReportModel) -> tuple[MplFigure, str] | None:
    comparisons = model.comparisons_for("batch_ready_s")
    if not comparisons:
        return None
    arms = [a for a in model.arm_names() if any(c.arm == a for c in comparisons)]
    sizes = sorted({c.size for c in comparisons})
    height = max(2.2, 0.45 * len(arms) * max(1, len(sizes)) ** 0.5 + 1.2)
    figure = _new_figure(8.0, height)
    ax = figure.subplots()
    step = 0.7 / max(1, len(sizes))
    markers = ("o", "s", "D", "^", "v", "P")
    for j, size in enumerate(sizes):
        color = PALETTE[j % len(PALETTE)]
        for i, arm in enumerate(arms):
            c = next((c for c in comparisons if c.arm == arm and c.size == size), None)
            if c is None:
                continue
            y = i + (j - (len(sizes) - 1) / 2.0) * step
            marker = markers[j % len(markers)]
            if c.pct_ci is not None:
                lo, hi = c.pct_ci
                ax.errorbar(
                    [c.pct_reduction],
                    [y],
                    xerr=[[c.pct_reduction - lo], [hi - c.pct_reduction]],
                    fmt=marker,
                    color=color,
                    capsize=3,
                    markersize=5,
                    label=f"{size} pods" if i == 0 else None,
                )
            else:  # n too small: the point only, hollow
                ax.plot(
                    [c.pct_reduction],
                    [y],
                    marker=marker,
                    markerfacecolor="white",
                    color=color,
                    linestyle="none",
                    label=f"{size} pods" if i == 0 else None,
                )
    ax.axvline(0.0, color="#555555", linewidth=1.0)
    ax.set_yticks(range(len(arms)), arms)
    ax.invert_yaxis()
    ax.set_xlabel(
        f"reduction of batch ready time vs {model.baseline} (%), {level(model.confidence)} CI"
    )
    ax.grid(True, axis="x", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if len(sizes) > 1:
        ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        ax.set_title(f"{sizes[0]} pods", fontsize=10)
    caption = (
        "Right of 0: the arm is faster than the baseline; left: slower. Whiskers are the "
        "intervals from stats (geometric-mean ratio, paired by block); hollow points had too "
        "few rounds for an interval."
    )
    return figure, caption


def _cdf(model: ReportModel) -> tuple[MplFigure, str] | None:
    pods = model.pod_latencies
    if pods.empty:
        return None
    if model.combined_arm is not None and model.baseline is not None:
        arms = [model.baseline, model.combined_arm]
        what = f"{model.baseline} vs {model.combined_arm}"
    else:
        arms = list(model.arm_names())[:MAX_CDF_ARMS]
        what = "every arm" if len(arms) == len(model.arms) else f"first {len(arms)} arms"
    pods = pods[pods["arm"].isin(arms)]
    sizes = [s for s in model.sizes if (pods["size"] == s).any()]
    if not sizes:
        return None
    colors = _colors(model)
    figure = _new_figure(min(4.2 * len(sizes), 13.0), 3.4)
    axes = figure.subplots(1, len(sizes), squeeze=False)[0]
    for ax, size in zip(axes, sizes, strict=True):
        for arm in arms:
            values = np.sort(
                pods.loc[(pods["arm"] == arm) & (pods["size"] == size), "latency_s"]
                .astype(float)
                .to_numpy()
            )
            if not values.size:
                continue
            fraction = np.arange(1, values.size + 1) / values.size
            ax.step(
                np.concatenate([[0.0], values]),
                np.concatenate([[0.0], fraction]),
                where="post",
                color=colors.get(arm, PALETTE[0]),
                linewidth=1.6,
                label=arm,
            )
        ax.set_title(f"{size} pods", fontsize=10)
        ax.set_xlabel("per-pod latency (s)")
        ax.set_ylabel("fraction of pods Ready")
        ax.set_ylim(0.0, 1.02)
        ax.set_xlim(left=0.0)
        _style(ax)
        ax.legend(frameon=False, fontsize=8, loc="lower right")
    caption = (
        f"Per-pod latency (create request sent to Ready seen), {what}, every pod of the "
        "analysed rounds pooled. Further left is faster."
    )
    return figure, caption


def standalone_svg(svg: str) -> str:
    """An embedded (cleaned) SVG as a file of its own: the namespaces an image file needs."""
    return svg.replace(
        "<svg",
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"',
        1,
    )
