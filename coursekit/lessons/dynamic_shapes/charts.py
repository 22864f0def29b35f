"""Lesson charts: stream_chart, throughput_chart (matplotlib figures, built without pyplot state)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from coursekit.plots import BAR_COLORS, fmt, log_bars

STRATEGY_COLORS = ("#616161", "#c62828", "#ef6c00", "#6a1b9a", "#1565c0", "#2e7d32", "#00838f", "#ad1457")


def stream_chart(
    names: list[str],
    latency_ms: list[list[float]],
    compiles: list[list[int]],
    no_compiled: list[list[bool]],
    lengths: list[int],
    title: str,
) -> Figure:
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
            top.scatter(
                fallback,
                [ms[x] for x in fallback],
                marker="x",
                s=50,
                color=color,
                zorder=3,
                label=f"{name}: ran no compiled code",
            )
        nudge = 0.06 * (i - (len(names) - 1) / 2)  # equal counts would hide each other's lines
        bottom.step(xs, [f + nudge for f in frames], where="post", color=color, linewidth=1.6, label=name)
        bottom.annotate(f" {frames[-1]}", (xs[-1], frames[-1] + nudge), va="center", fontsize=7, color=color)
    top.set_yscale("log")
    top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
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


def throughput_chart(
    names: list[str],
    tokens_per_s: list[float],
    tokens_iqr: list[tuple[float, float]],
    stream_s: list[float],
    title: str,
) -> Figure:
    """Left: steady-state throughput per strategy (median, IQR whiskers, linear x). Right: the whole first
    pass over the stream, compiling included (log x).

    ``title`` should name the device the numbers were measured on.
    """
    fig = Figure(figsize=(11, 0.45 * len(names) + 1.8), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(names)))
    errors = [
        [m - lo for m, (lo, _) in zip(tokens_per_s, tokens_iqr)],
        [hi - m for m, (_, hi) in zip(tokens_per_s, tokens_iqr)],
    ]
    left.barh(ys, tokens_per_s, xerr=errors, color=BAR_COLORS[0], alpha=0.85, capsize=3)
    for y, (m, (_, hi)) in enumerate(zip(tokens_per_s, tokens_iqr)):
        left.annotate(f"  {fmt(m)}", (hi, y), va="center", fontsize=8)
    left.set_yticks(ys, names)
    left.set_xlim(0, max(hi for _, hi in tokens_iqr) * 1.35)
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    left.set_xlabel("steady state: real (unpadded) tokens per second")
    left.grid(axis="x", alpha=0.3)
    log_bars(right, names, stream_s, BAR_COLORS[1], "s")
    right.set_xlabel("first pass over the stream, compiling included, s (log scale)")
    left.invert_yaxis()  # the y axis is shared: invert once, first strategy on top
    fig.suptitle(title)
    return fig
