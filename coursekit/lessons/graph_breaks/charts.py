"""Lesson charts: graph_break_chart (matplotlib figures, built without pyplot state)."""

from __future__ import annotations

from matplotlib.figure import Figure

from coursekit.plots import BAR_COLORS, fmt


def graph_break_chart(
    variants: list[str],
    graphs: list[int],
    breaks: list[int],
    steps: list[str],
    step_ms: list[float],
    step_iqr: list[tuple[float, float]],
    title: str,
) -> Figure:
    """Left: graphs and graph breaks per variant; right: step time per setup (median, IQR whiskers), linear x.

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 0.42 * max(len(variants), len(steps)) + 1.9), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(1.1, 1))
    ys = list(range(len(variants)))
    left.barh([y - 0.2 for y in ys], graphs, height=0.4, color=BAR_COLORS[0], label="graphs")
    left.barh([y + 0.2 for y in ys], breaks, height=0.4, color=BAR_COLORS[1], label="graph breaks")
    for y, g, b in zip(ys, graphs, breaks):
        left.annotate(f" {g}", (g, y - 0.2), va="center", fontsize=8)
        left.annotate(f" {b}", (b, y + 0.2), va="center", fontsize=8)
    left.set_yticks(ys, variants)
    left.invert_yaxis()
    left.set_xlim(0, max(graphs) + 1)
    left.xaxis.get_major_locator().set_params(integer=True)
    left.set_xlabel("count, from torch._dynamo.explain (one forward)")
    left.legend(loc="lower right", fontsize=8)
    ys = list(range(len(steps)))
    errors = [[m - lo for m, (lo, _) in zip(step_ms, step_iqr)], [hi - m for m, (_, hi) in zip(step_ms, step_iqr)]]
    right.barh(ys, step_ms, xerr=errors, color=BAR_COLORS[0], alpha=0.85, capsize=3)
    for y, (m, (_, hi)) in enumerate(zip(step_ms, step_iqr)):
        right.annotate(f"  {fmt(m)} ms", (hi, y), va="center", fontsize=8)
    right.set_yticks(ys, steps)
    right.invert_yaxis()
    right.set_xlim(0, max(hi for _, hi in step_iqr) * 1.3)  # room on the right for the labels
    right.set_xlabel("training step, ms (median, IQR whiskers)")
    right.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    return fig
