"""Small matplotlib charts for lessons and grading reports.

The helpers build a ``matplotlib.figure.Figure`` directly (no pyplot state), so
they work under the Agg backend, never call ``show`` and never display twice in
a notebook: the caller displays the returned figure or saves it.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

PASS_COLOR = "#2e7d32"
FAIL_COLOR = "#c62828"
BAR_COLORS = ("#1565c0", "#ef6c00")


def fmt(value: float) -> str:
    """Three significant digits, thousands written out in full (``211,000`` not ``2.11e+05``)."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def plain_log_axis(ax: Axes, low: float, high: float) -> None:
    """Log-scale x from ``low`` to ``high``, ticks as plain numbers (1-2-5 steps over short spans)."""
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    subs = (1.0, 2.0, 5.0) if high / low < 300 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def log_bars(ax: Axes, names: Sequence[str], values: Sequence[float], color: str, unit: str) -> None:
    """Horizontal bars, log-scale x, each bar labelled with its value."""
    ys = range(len(names))
    ax.barh(ys, values, color=color)
    ax.set_yticks(list(ys), list(names))
    plain_log_axis(ax, min(values) / 2, max(values) * 4)  # room on the right for the labels
    for y, v in zip(ys, values):
        ax.annotate(f" {fmt(v)} {unit}", (v, y), va="center", fontsize=8)
    ax.grid(axis="x", which="major", alpha=0.3)


def ladder_chart(names: list[str], step_ms: list[float], loss_us: list[float], title: str) -> Figure:
    """Two panels of horizontal bars: training-step time (ms) and loss fwd+bwd time (us), log x.

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 0.45 * len(names) + 1.6), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    log_bars(left, names, step_ms, BAR_COLORS[0], "ms")
    left.set_xlabel("training step, ms (log scale)")
    log_bars(right, names, loss_us, BAR_COLORS[1], "us")
    right.set_xlabel("loss forward+backward, us (log scale)")
    left.invert_yaxis()  # the y axis is shared: invert once, first rung on top
    fig.suptitle(title)
    return fig


def speedup_chart(labels: list[str], measured: list[float], required: list[float], title: str) -> Figure:
    """Measured speedups as bars (green: meets ``required``, red: misses it) with a tick at each threshold.

    The x axis turns logarithmic when the values span more than a factor of 20.
    """
    fig = Figure(figsize=(8, 0.5 * len(labels) + 1.4), layout="constrained")
    ax = fig.subplots()
    ys = list(range(len(labels)))
    colors = [PASS_COLOR if m >= r else FAIL_COLOR for m, r in zip(measured, required)]
    ax.barh(ys, measured, color=colors, alpha=0.85)
    ax.scatter(required, ys, marker="|", s=600, linewidths=2.5, color="black", zorder=3, label="required")
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1, label="no speedup (1x)")
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    values = [v for v in [*measured, *required, 1.0] if v > 0]
    if max(values) / min(values) > 20:
        plain_log_axis(ax, min(values) / 1.5, max(values) * 8)  # room on the right for the labels
    else:
        ax.set_xlim(0, max(values) * 1.6)
    for y, m, r in zip(ys, measured, required):
        ax.annotate(f"  {m:.2f}x (needs {r:.2f}x)", (max(m, r), y), va="center", fontsize=8)
    ax.set_xlabel("speedup (baseline time / candidate time)")
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    ax.set_title(title)
    return fig


Quartiles = tuple[float, float, float]  # median, q1, q3


def grouped_bars(
    ax: Axes, names: Sequence[str], series: dict[str, Sequence[Quartiles]], unit: str, invert: bool = True
) -> None:
    """Horizontal bars, one group per name and one bar per series (median, IQR whiskers), linear x;
    ``invert`` puts the first name on top (leave it to the caller when the y axis is shared)."""
    height = 0.8 / len(series)
    right = 0.0
    for i, (label, values) in enumerate(series.items()):
        ys = [y - 0.4 + height * (i + 0.5) for y in range(len(names))]
        meds = [m for m, _, _ in values]
        errors = [[m - lo for m, lo, _ in values], [hi - m for m, _, hi in values]]
        ax.barh(
            ys,
            meds,
            height=height,
            xerr=errors,
            color=BAR_COLORS[i % len(BAR_COLORS)],
            alpha=0.85,
            capsize=2,
            label=label,
        )
        for y, (m, _, hi) in zip(ys, values):
            ax.annotate(f" {fmt(m)} {unit}", (hi, y), va="center", fontsize=7)
        right = max(right, *(hi for _, _, hi in values))
    ax.set_yticks(list(range(len(names))), list(names))
    if invert:
        ax.invert_yaxis()
    ax.set_xlim(0, right * 1.3)  # room on the right for the labels
    ax.grid(axis="x", alpha=0.3)
