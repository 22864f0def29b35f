"""Lesson charts: cold_start_chart, capture_chart, recompile_chart (matplotlib figures, built without pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from coursekit.plots import BAR_COLORS, fmt, log_bars


def cold_start_chart(names: list[str], first_s: list[float], title: str) -> Figure:
    """Horizontal bars: the first training step's seconds (compiling included) per cache setting, log x.

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(8, 0.5 * len(names) + 1.4), layout="constrained")
    ax = fig.subplots()
    log_bars(ax, names, first_s, BAR_COLORS[1], "s")
    ax.invert_yaxis()
    ax.set_xlabel("first training step in a fresh process, compiling included, s (log scale)")
    fig.suptitle(title)
    return fig


def capture_chart(depths: Sequence[int], seconds: dict[str, Sequence[float]], title: str) -> Figure:
    """Lines: capture seconds against model depth, one line per way of compiling.

    ``title`` should name the device and backend the numbers were measured with.
    """
    fig = Figure(figsize=(7, 3.8), layout="constrained")
    ax = fig.subplots()
    for (name, values), color in zip(seconds.items(), BAR_COLORS):
        ax.plot(list(depths), list(values), marker="o", color=color, label=name)
        ax.annotate(f" {fmt(values[-1])} s", (depths[-1], values[-1]), va="center", fontsize=8)
    ax.set_xticks(list(depths))
    span = depths[-1] - depths[0]
    ax.set_xlim(depths[0] - 0.05 * span, depths[-1] + 0.2 * span)  # room on the right for the labels
    ax.set_xlabel("blocks in the model")
    ax.set_ylabel("first step, capture included, s")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title)
    return fig


def recompile_chart(runs: dict[str, tuple[Sequence[int], Sequence[float]]], title: str) -> Figure:
    """Left: graphs compiled so far after each step. Right: each step's optimizer update, s (log y).
    ``runs`` maps a label to (graphs after each step, seconds of each step).

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    for (name, (graphs, step_s)), color in zip(runs.items(), BAR_COLORS):
        steps = list(range(1, len(graphs) + 1))
        left.step(steps, list(graphs), where="post", color=color, marker="o", label=name)
        right.plot(steps, list(step_s), color=color, marker="o", label=name)
    left.set_xlabel("training step")
    left.set_ylabel("graphs compiled so far")
    left.yaxis.get_major_locator().set_params(integer=True)
    left.grid(alpha=0.3)
    right.set_yscale("log")
    right.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    right.set_xlabel("training step")
    right.set_ylabel("optimizer + scheduler step, s (log scale)")
    right.grid(alpha=0.3, which="both")
    right.legend(fontsize=8)
    fig.suptitle(title)
    return fig
