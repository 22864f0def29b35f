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


def _fmt(value: float) -> str:
    """Three significant digits, thousands written out in full (``211,000`` not ``2.11e+05``)."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def _plain_log_axis(ax: Axes, low: float, high: float) -> None:
    """Log-scale x from ``low`` to ``high``, ticks as plain numbers (1-2-5 steps over short spans)."""
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    subs = (1.0, 2.0, 5.0) if high / low < 300 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _log_bars(ax: Axes, names: Sequence[str], values: Sequence[float], color: str, unit: str) -> None:
    """Horizontal bars, log-scale x, each bar labelled with its value."""
    ys = range(len(names))
    ax.barh(ys, values, color=color)
    ax.set_yticks(list(ys), list(names))
    _plain_log_axis(ax, min(values) / 2, max(values) * 4)  # room on the right for the labels
    for y, v in zip(ys, values):
        ax.annotate(f" {_fmt(v)} {unit}", (v, y), va="center", fontsize=8)
    ax.grid(axis="x", which="major", alpha=0.3)


def ladder_chart(names: list[str], step_ms: list[float], loss_us: list[float], title: str) -> Figure:
    """Two panels of horizontal bars: training-step time (ms) and loss fwd+bwd time (us), log x.

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 0.45 * len(names) + 1.6), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    _log_bars(left, names, step_ms, BAR_COLORS[0], "ms")
    left.set_xlabel("training step, ms (log scale)")
    _log_bars(right, names, loss_us, BAR_COLORS[1], "us")
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
        _plain_log_axis(ax, min(values) / 1.5, max(values) * 8)  # room on the right for the labels
    else:
        ax.set_xlim(0, max(values) * 1.6)
    for y, m, r in zip(ys, measured, required):
        ax.annotate(f"  {m:.2f}x (needs {r:.2f}x)", (max(m, r), y), va="center", fontsize=8)
    ax.set_xlabel("speedup (baseline time / candidate time)")
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    ax.set_title(title)
    return fig


def graph_break_chart(variants: list[str], graphs: list[int], breaks: list[int], steps: list[str],
                      step_ms: list[float], step_iqr: list[tuple[float, float]], title: str) -> Figure:
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
        right.annotate(f"  {_fmt(m)} ms", (hi, y), va="center", fontsize=8)
    right.set_yticks(ys, steps)
    right.invert_yaxis()
    right.set_xlim(0, max(hi for _, hi in step_iqr) * 1.3)  # room on the right for the labels
    right.set_xlabel("training step, ms (median, IQR whiskers)")
    right.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    return fig


STRATEGY_COLORS = ("#616161", "#c62828", "#ef6c00", "#6a1b9a", "#1565c0", "#2e7d32", "#00838f", "#ad1457")


def stream_chart(names: list[str], latency_ms: list[list[float]], compiles: list[list[int]],
                 no_compiled: list[list[bool]], lengths: list[int], title: str) -> Figure:
    """Top: each call's latency over a stream (log y, one line per strategy; x marks calls that ran no
    compiled code). Bottom: compiles so far after each call. ``lengths`` labels the x axis.

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(1.6, 1))
    xs = list(range(len(lengths)))
    for i, (name, ms, frames, eager) in enumerate(zip(names, latency_ms, compiles, no_compiled)):
        color = STRATEGY_COLORS[i % len(STRATEGY_COLORS)]
        top.plot(xs, ms, marker="o", markersize=3, linewidth=1.2, color=color, label=name)
        fallback = [x for x, e in zip(xs, eager) if e]
        if fallback and any(frames):  # a compiled strategy whose calls ran eagerly
            top.scatter(fallback, [ms[x] for x in fallback], marker="x", s=50, color=color, zorder=3,
                        label=f"{name}: ran no compiled code")
        nudge = 0.06 * (i - (len(names) - 1) / 2)  # equal counts would hide each other's lines
        bottom.step(xs, [f + nudge for f in frames], where="post", color=color, linewidth=1.6, label=name)
        bottom.annotate(f" {frames[-1]}", (xs[-1], frames[-1] + nudge), va="center", fontsize=7, color=color)
    top.set_yscale("log")
    top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt(v)))
    top.set_ylabel("latency of the call, ms (log)")
    top.grid(axis="y", which="major", alpha=0.3)
    top.legend(fontsize=7, ncols=2, loc="upper right")
    bottom.set_ylabel("compiles so far")
    bottom.yaxis.get_major_locator().set_params(integer=True)
    bottom.grid(axis="y", alpha=0.3)
    bottom.set_xticks(xs, [str(n) for n in lengths], fontsize=7)
    bottom.set_xlabel("call (labelled with the batch's longest sequence)")
    fig.suptitle(title)
    return fig


def throughput_chart(names: list[str], tokens_per_s: list[float], tokens_iqr: list[tuple[float, float]],
                     stream_s: list[float], title: str) -> Figure:
    """Left: steady-state throughput per strategy (median, IQR whiskers, linear x). Right: the whole first
    pass over the stream, compiling included (log x).

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 0.45 * len(names) + 1.8), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(names)))
    errors = [[m - lo for m, (lo, _) in zip(tokens_per_s, tokens_iqr)],
              [hi - m for m, (_, hi) in zip(tokens_per_s, tokens_iqr)]]
    left.barh(ys, tokens_per_s, xerr=errors, color=BAR_COLORS[0], alpha=0.85, capsize=3)
    for y, (m, (_, hi)) in enumerate(zip(tokens_per_s, tokens_iqr)):
        left.annotate(f"  {_fmt(m)}", (hi, y), va="center", fontsize=8)
    left.set_yticks(ys, names)
    left.set_xlim(0, max(hi for _, hi in tokens_iqr) * 1.35)
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt(v)))
    left.set_xlabel("steady state: real (unpadded) tokens per second")
    left.grid(axis="x", alpha=0.3)
    _log_bars(right, names, stream_s, BAR_COLORS[1], "s")
    right.set_xlabel("first pass over the stream, compiling included, s (log scale)")
    left.invert_yaxis()  # the y axis is shared: invert once, first strategy on top
    fig.suptitle(title)
    return fig


Quartiles = tuple[float, float, float]  # median, q1, q3


def _grouped_bars(ax: Axes, names: Sequence[str], series: dict[str, Sequence[Quartiles]], unit: str,
                  invert: bool = True) -> None:
    """Horizontal bars, one group per name and one bar per series (median, IQR whiskers), linear x;
    ``invert`` puts the first name on top (leave it to the caller when the y axis is shared)."""
    height = 0.8 / len(series)
    right = 0.0
    for i, (label, values) in enumerate(series.items()):
        ys = [y - 0.4 + height * (i + 0.5) for y in range(len(names))]
        meds = [m for m, _, _ in values]
        errors = [[m - lo for m, lo, _ in values], [hi - m for m, _, hi in values]]
        ax.barh(ys, meds, height=height, xerr=errors, color=BAR_COLORS[i % len(BAR_COLORS)], alpha=0.85,
                capsize=2, label=label)
        for y, (m, _, hi) in zip(ys, values):
            ax.annotate(f" {_fmt(m)} {unit}", (hi, y), va="center", fontsize=7)
        right = max(right, *(hi for _, _, hi in values))
    ax.set_yticks(list(range(len(names))), list(names))
    if invert:
        ax.invert_yaxis()
    ax.set_xlim(0, right * 1.3)  # room on the right for the labels
    ax.grid(axis="x", alpha=0.3)


def step_time_chart(panels: Sequence[tuple[str, Sequence[str], dict[str, Sequence[Quartiles]]]],
                    title: str) -> Figure:
    """One panel per ``(xlabel, names, {series: [(median, q1, q3), ...]})``: grouped bars of step time per
    variant, one bar per series (say fp32 and bf16), IQR whiskers, linear x.

    ``title`` should name the device the numbers were measured on.
    """
    rows = max(len(names) for _, names, _ in panels)
    fig = Figure(figsize=(11, 0.55 * rows + 1.8), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (xlabel, names, series) in zip(axes, panels):
        _grouped_bars(ax, names, series, "ms")
        ax.set_xlabel(xlabel)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=8)
    fig.suptitle(title)
    return fig


def compile_cost_chart(names: list[str], first_s: list[float], step_ms: list[Quartiles], eager_ms: list[float],
                       title: str) -> Figure:
    """Left: the first call (compiling included) per setting, s, log x. Right: the steady-state step (median,
    IQR whiskers) with a tick at eager's step time measured alongside each (``eager_ms``).

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 0.5 * len(names) + 1.8), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    _log_bars(left, names, first_s, BAR_COLORS[1], "s")
    left.set_xlabel("first call, compiling included, s (log scale)")
    _grouped_bars(right, names, {"compiled step": step_ms}, "ms", invert=False)
    right.scatter(eager_ms, list(range(len(names))), marker="|", s=600, linewidths=2.5, color="black", zorder=3,
                  label="eager step, same trials")
    right.set_xlim(0, max(*eager_ms, *(hi for _, _, hi in step_ms)) * 1.3)
    fig.legend(*right.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8, markerscale=0.3)
    right.set_xlabel("steady-state training step, ms (median, IQR whiskers)")
    left.invert_yaxis()  # the y axis is shared: invert once, first setting on top
    fig.suptitle(title)
    return fig


def cold_start_chart(names: list[str], first_s: list[float], title: str) -> Figure:
    """Horizontal bars: the first training step's seconds (compiling included) per cache setting, log x.

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(8, 0.5 * len(names) + 1.4), layout="constrained")
    ax = fig.subplots()
    _log_bars(ax, names, first_s, BAR_COLORS[1], "s")
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
        ax.annotate(f" {_fmt(values[-1])} s", (depths[-1], values[-1]), va="center", fontsize=8)
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
    right.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt(v)))
    right.set_xlabel("training step")
    right.set_ylabel("optimizer + scheduler step, s (log scale)")
    right.grid(alpha=0.3, which="both")
    right.legend(fontsize=8)
    fig.suptitle(title)
    return fig
