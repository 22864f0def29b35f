"""Lesson charts: step_time_chart, compile_cost_chart (matplotlib figures, built without pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from coursekit.plots import BAR_COLORS, Quartiles, grouped_bars, log_bars


def step_time_chart(panels: Sequence[tuple[str, Sequence[str], dict[str, Sequence[Quartiles]]]], title: str) -> Figure:
    """One panel per ``(xlabel, names, {series: [(median, q1, q3), ...]})``: grouped bars of step time per
    variant, one bar per series (say fp32 and bf16), IQR whiskers, linear x.

    ``title`` should name the device the numbers were measured on.
    """
    rows = max(len(names) for _, names, _ in panels)
    fig = Figure(figsize=(11, 0.55 * rows + 1.8), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (xlabel, names, series) in zip(axes, panels):
        grouped_bars(ax, names, series, "ms")
        ax.set_xlabel(xlabel)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=8)
    fig.suptitle(title)
    return fig


def compile_cost_chart(
    names: list[str], first_s: list[float], step_ms: list[Quartiles], eager_ms: list[float], title: str
) -> Figure:
    """Left: the first call (compiling included) per setting, s, log x. Right: the steady-state step (median,
    IQR whiskers) with a tick at eager's step time measured alongside each (``eager_ms``).

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 0.5 * len(names) + 1.8), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    log_bars(left, names, first_s, BAR_COLORS[1], "s")
    left.set_xlabel("first call, compiling included, s (log scale)")
    grouped_bars(right, names, {"compiled step": step_ms}, "ms", invert=False)
    right.scatter(
        eager_ms,
        list(range(len(names))),
        marker="|",
        s=600,
        linewidths=2.5,
        color="black",
        zorder=3,
        label="eager step, same trials",
    )
    right.set_xlim(0, max(*eager_ms, *(hi for _, _, hi in step_ms)) * 1.3)
    fig.legend(*right.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8, markerscale=0.3)
    right.set_xlabel("steady-state training step, ms (median, IQR whiskers)")
    left.invert_yaxis()  # the y axis is shared: invert once, first setting on top
    fig.suptitle(title)
    return fig
