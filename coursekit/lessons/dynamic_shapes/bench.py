"""Measure lesson 4's dynamic-shape strategies and record the figures.

The lesson notebook and ``python -m coursekit.bench --lesson 4`` both call
:func:`measure_dynamic_shapes`, so the figures a learner sees and the recorded
ones come from the same code.  Every strategy runs ``SeqClassifier``
(inference, ``no_grad``) over the same seeded stream of length-grouped batches:

* ``eager``: no compiling (the reference);
* ``static``: ``torch.compile(model, dynamic=False)``: one graph per length, until the recompile limit;
* ``automatic dynamic``: ``torch.compile(model)``: static first, dynamic after the first new length;
* ``dynamic=True``: dynamic from the first call;
* ``mark_dynamic``: ``torch._dynamo.mark_dynamic(tokens, 1, min=MIN_LEN, max=MAX_LEN)`` on every batch;
* ``buckets``: ``dynamic=False`` with batches padded to ``BUCKETS`` (a few static shapes, masks keep results exact).

For each: the latency of every call in order (first calls include compiling),
the compiled graphs after each call (``CompileCounterWithBackend``), whether
each call ran compiled code, whether Dynamo hit ``recompile_limit``, the whole
stream's time, the steady-state time of a pass over the stream interleaved with
eager (``coursekit.timing.compare``), and each call's steady-state latency next to
eager's on the same batch (medians of ``STEADY_PASSES`` alternating passes).  Files are written by
``coursekit.results.write_results`` as ``lesson04-<profile>-<device>-torch<version>.{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from coursekit.cache import use_repo_compile_cache
from coursekit.lessons.dynamic_shapes.material import (
    BUCKETS,
    MAX_LEN,
    MIN_LEN,
    Batch,
    PackedClassifier,
    build,
    layout_costs,
    length_stream,
    packed_batches,
    pad_to_bucket,
    pad_to_longest,
    stream_batches,
)
from coursekit.profile import Profile, apply_threads
from coursekit.results import doc_header, duration, machine_label
from coursekit.timing import compare, time_each, time_per_call

LESSON = "lesson04"
STEPS, BATCH, SEED = 20, 8, 4  # the stream: 20 batches of 8 sequences, lengths MIN_LEN..MAX_LEN
STEADY_PASSES = 5  # extra passes over the stream for each call's steady-state latency


@dataclass(frozen=True)
class Strategy:
    """How one strategy compiles the model and collates its batches."""

    name: str
    how: str  # one line for tables
    compiled: bool = True
    dynamic: bool | None = None
    mark: bool = False  # mark_dynamic(tokens, 1, min=MIN_LEN, max=MAX_LEN) before each call
    buckets: bool = False  # pad_to_bucket instead of pad_to_longest


STRATEGIES = (
    Strategy("eager", "no compile, pad to longest", compiled=False),
    Strategy("static", "dynamic=False, pad to longest", dynamic=False),
    Strategy("automatic dynamic", "default (dynamic=None), pad to longest"),
    Strategy("dynamic=True", "dynamic=True, pad to longest", dynamic=True),
    Strategy("mark_dynamic", f"default + mark_dynamic(tokens, 1, min={MIN_LEN}, max={MAX_LEN})", mark=True),
    Strategy("buckets", f"dynamic=False, pad to buckets {BUCKETS} + mask", dynamic=False, buckets=True),
)


class RunCounter(CompileCounterWithBackend):
    """``CompileCounterWithBackend`` that also counts calls into the compiled graphs (``runs``).

    A call that leaves ``runs`` unchanged ran no compiled code: Dynamo fell back to eager.
    """

    def __init__(self, backend: str) -> None:
        super().__init__(backend)
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        compiled = super().__call__(gm, example_inputs)

        def run(*args):
            self.runs += 1
            return compiled(*args)

        return run


class _Capture(logging.Handler):
    """Keeps the messages of log records that contain ``needle``."""

    def __init__(self, needle: str) -> None:
        super().__init__(logging.WARNING)
        self.needle, self.messages = needle, []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.needle in message:
            self.messages.append(message)


@contextmanager
def recompile_limit_warnings() -> Iterator[list[str]]:
    """Collect Dynamo's "hit config.recompile_limit" warnings in the block (they still reach stderr)."""
    handler = _Capture("recompile_limit")
    logger = logging.getLogger("torch._dynamo.convert_frame")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def mark_lengths(batches: list[Batch], low: int = MIN_LEN, high: int = MAX_LEN) -> list[Batch]:
    """``mark_dynamic`` the length dimension of every batch's tokens, with bounds."""
    for tokens, _ in batches:
        torch._dynamo.mark_dynamic(tokens, 1, min=low, max=high)
    return batches


def stream_pass(fn: Callable, batches: Sequence[Sequence[torch.Tensor]]) -> Callable[[], None]:
    """A function that runs ``fn(*batch)`` over every batch once, without gradients (padded ``(tokens, lengths)``
    batches, or packed ones)."""

    def run() -> None:
        with torch.no_grad():
            for batch in batches:
                fn(*batch)

    return run


def _ms(timing) -> dict[str, float]:
    return {"median": timing.median_s * 1e3, "q1": timing.q1_s * 1e3, "q3": timing.q3_s * 1e3}


def first_pass(fn: Callable, counter: RunCounter, batches: list[Batch], device: str) -> list[dict]:
    """Each call's latency (compiling included), compiles so far and whether it ran compiled code."""
    frames, ran = [], []

    def call(tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        runs = counter.runs
        with torch.no_grad():
            out = fn(tokens, lengths)
        frames.append(counter.frame_count)
        ran.append(counter.runs > runs)
        return out

    seconds = time_each(call, batches, device)
    return [
        {"length": t.shape[1], "ms": s * 1e3, "frames": f, "ran_compiled": r}
        for (t, _), s, f, r in zip(batches, seconds, frames, ran)
    ]


def steady_calls(fn: Callable, eager: Callable, batches: list[Batch], device: str, timeline: list[dict]) -> None:
    """Add each call's steady-state latency to ``timeline``, and eager's on the same batch: medians over
    ``STEADY_PASSES`` passes, the two alternating pass by pass."""
    ours, theirs = [], []
    with torch.no_grad():
        for _ in range(STEADY_PASSES):
            ours.append(time_each(fn, batches, device))
            theirs.append(time_each(eager, batches, device))
    for point, a, b in zip(timeline, zip(*ours), zip(*theirs)):
        point["steady_ms"], point["eager_steady_ms"] = statistics.median(a) * 1e3, statistics.median(b) * 1e3


def run_strategy(
    profile: Profile,
    strategy: Strategy,
    model: torch.nn.Module,
    stream: list[list[int]],
    eager_pass: Callable[[], None],
    backend: str = "inductor",
    seed: int = SEED,
) -> dict:
    """One strategy over the stream: first pass, compiles and fallbacks, then the steady state."""
    torch.compiler.reset()
    batches = stream_batches(stream, seed, pad_to_bucket if strategy.buckets else pad_to_longest, profile.device)
    if strategy.mark:
        mark_lengths(batches)
    counter = RunCounter(backend)
    fn = torch.compile(model, backend=counter, dynamic=strategy.dynamic) if strategy.compiled else model
    graphs_before = counters["stats"]["unique_graphs"]
    with recompile_limit_warnings() as warnings:
        timeline = first_pass(fn, counter, batches, profile.device)
    real = sum(sum(lengths) for lengths in stream)
    row = {
        "name": strategy.name,
        "how": strategy.how,
        "compiled": strategy.compiled,
        "timeline": timeline,
        "frames": counter.frame_count,
        "graphs": counters["stats"]["unique_graphs"] - graphs_before if strategy.compiled else 0,
        "shapes": len({t.shape[1] for t, _ in batches}),
        "eager_fallback_calls": sum(not p["ran_compiled"] for p in timeline) if strategy.compiled else 0,
        "recompile_limit_hit": bool(warnings),
        "recompile_limit_warnings": [w.splitlines()[0] for w in warnings],
        "stream_ms": sum(p["ms"] for p in timeline),
        "first_call_ms": timeline[0]["ms"],
        "padding": 1 - real / sum(t.numel() for t, _ in batches),
    }
    this_pass = stream_pass(fn, batches)
    if strategy.compiled:
        ab = compare(
            eager_pass,
            this_pass,
            lambda i: (),
            device=profile.device,
            trials=profile.trials,
            warmup=profile.warmup,
            min_sample_s=profile.min_sample_s,
        )
        steady = ab.candidate
        row["speedup"] = ab.speedup_summary()
        row["eager_pass_ms"] = _ms(ab.baseline)  # eager in the same trials: what "vs eager" compares with
    else:
        steady = time_per_call(
            this_pass,
            lambda i: (),
            device=profile.device,
            warmup=profile.warmup,
            samples=profile.trials,
            min_sample_s=profile.min_sample_s,
        )
    row["pass_ms"] = _ms(steady)
    row["tokens_per_s"] = real / steady.median_s
    steady_calls(fn, model, batches, profile.device, timeline)
    return row


def measure_dynamic_shapes(
    profile: Profile,
    backend: str = "inductor",
    steps: int = STEPS,
    batch: int = BATCH,
    seed: int = SEED,
    names: list[str] | None = None,
) -> dict:
    """Every strategy of ``STRATEGIES`` (or those in ``names``) over one seeded stream (see the module docstring).

    Call ``use_repo_compile_cache()`` before importing this module to use the repository's Inductor cache.
    """
    apply_threads(profile)
    cache = Path(use_repo_compile_cache())
    cache_entries = len(list(cache.iterdir())) if cache.is_dir() else 0  # 0: a cold start, every compile in full
    stream = length_stream(steps, batch, seed)
    model = build("plain", seed, profile.device)
    eager_pass = stream_pass(model, stream_batches(stream, seed, device=profile.device))
    rows = [
        run_strategy(profile, s, model, stream, eager_pass, backend, seed)
        for s in STRATEGIES
        if names is None or s.name in names
    ]
    torch.compiler.reset()
    return {
        "backend": backend,
        "recompile_limit": torch._dynamo.config.recompile_limit,
        "compile_cache": {"dir": str(cache), "entries_before": cache_entries},
        "stream": {
            "steps": steps,
            "batch": batch,
            "seed": seed,
            "longest": [max(s) for s in stream],
            "distinct_lengths": len({max(s) for s in stream}),
            "tokens": sum(map(sum, stream)),
        },
        "strategies": rows,
    }


def measure_packing(
    profile: Profile, backend: str = "inductor", steps: int = STEPS, batch: int = BATCH, seed: int = SEED
) -> dict:
    """The lesson's stream laid out two ways and timed against each other: padded to ``BUCKETS`` (``SeqClassifier``,
    a graph per bucket) and packed into rows of ``MAX_LEN`` (``PackedClassifier``, the same weights, one graph),
    both compiled with ``dynamic=False``. After a first pass each (compiling), ``compare`` interleaves whole passes
    over the stream; the packed outputs are checked against the bucketed ones, sequence by sequence."""
    apply_threads(profile)
    use_repo_compile_cache()
    stream = length_stream(steps, batch, seed)
    model = build("plain", seed, profile.device)
    packed_model = PackedClassifier().to(profile.device).eval()
    packed_model.load_state_dict(model.state_dict())
    bucketed = stream_batches(stream, seed, pad_to_bucket, profile.device)
    packed, where = packed_batches(stream, seed, device=profile.device)
    torch.compiler.reset()
    counters_before = counters["stats"]["unique_graphs"]
    by_bucket = torch.compile(model, dynamic=False, backend=backend)
    by_row = torch.compile(packed_model, dynamic=False, backend=backend)
    with torch.no_grad():
        want = [by_bucket(*b) for b in bucketed]  # the first passes compile
        got = [by_row(*p) for p in packed]
    graphs = counters["stats"]["unique_graphs"] - counters_before
    diff = max(
        float((out[slot] - want[b][j]).abs().max()) for out, held in zip(got, where) for slot, (b, j) in held.items()
    )
    ab = compare(
        stream_pass(by_bucket, bucketed),
        stream_pass(by_row, packed),
        lambda i: (),
        device=profile.device,
        trials=profile.trials,
        warmup=profile.warmup,
        min_sample_s=profile.min_sample_s,
    )
    torch.compiler.reset()
    real = sum(map(sum, stream))
    counted = {r["layout"].split()[0]: r for r in layout_costs(stream)}
    return {
        "backend": backend,
        "graphs": graphs,
        "max_abs_diff": diff,
        "speedup": ab.speedup_summary(),
        "layouts": [
            {**counted["buckets"], "pass_ms": _ms(ab.baseline), "tokens_per_s": real / ab.baseline.median_s},
            {**counted["packed"], "pass_ms": _ms(ab.candidate), "tokens_per_s": real / ab.candidate.median_s},
        ],
    }


def describe_packing(result: dict) -> str:
    """The two layouts side by side: steps, positions computed, padding, shapes, pass time and real tokens/s."""
    lines = [
        f"{'layout':28s} {'steps':>5s} {'positions':>9s} {'padding':>8s} {'shapes':>6s} {'pass':>10s} {'tokens/s':>10s}"
    ]
    for r in result["layouts"]:
        lines.append(
            f"{r['layout']:28s} {r['steps']:5d} {r['tokens']:9d} {r['padding']:8.0%} {r['shapes']:6d} "
            f"{duration(r['pass_ms']['median']):>10s} {r['tokens_per_s']:10,.0f}"
        )
    s = result["speedup"]
    lines.append(
        f"packed vs buckets, interleaved passes: {s['median']:.2f}x (IQR {s['q1']:.2f}-{s['q3']:.2f}, {s['trials']} "
        f"trials; above 1: packing faster); {result['graphs']} graphs compiled ({result['backend']}); outputs of "
        f"every sequence, packed vs bucketed: largest difference {result['max_abs_diff']:.1e}"
    )
    return "\n".join(lines)


def reduce_overhead_calls(
    profile: Profile, longest: tuple[int, ...] = (24, 24, 24, 40, 40, 40, 17, 17, 17, 24), seed: int = SEED
) -> dict:
    """``torch.compile(model, mode="reduce-overhead")`` (CUDA graphs) over batches with these longest lengths.

    Per call: latency, graphs compiled so far (Dynamo's ``unique_graphs`` counter) and CUDA graphs recorded
    so far (Dynamo's compile callbacks fire with ``CUDAGRAPH_RECORDING`` for each recording); plus
    Inductor's ``cudagraph*`` counters at the end. CUDA graphs need a CUDA device.
    """
    from torch._dynamo.callback import CallbackTrigger, callback_handler

    if profile.device_class != "cuda":
        raise RuntimeError("reduce-overhead records CUDA graphs: it needs a CUDA device")
    apply_threads(profile)
    use_repo_compile_cache()
    torch.compiler.reset()
    stream = [[n] * BATCH for n in longest]
    batches = stream_batches(stream, seed, device=profile.device)
    recorded: list[str] = []

    def on_start(args) -> None:
        if args.callback_trigger == CallbackTrigger.CUDAGRAPH_RECORDING:
            recorded.append(args.compile_id)

    model = build("plain", seed, profile.device)
    fn = torch.compile(model, mode="reduce-overhead")
    graphs, recordings = [], []
    graphs_before = counters["stats"]["unique_graphs"]
    cudagraph_before = {k: v for k, v in counters["inductor"].items() if "cudagraph" in k}

    def call(tokens: torch.Tensor, lengths: torch.Tensor) -> None:
        with torch.no_grad():
            fn(tokens, lengths)
        graphs.append(counters["stats"]["unique_graphs"] - graphs_before)
        recordings.append(len(recorded))

    callback_handler.register_start_callback(on_start)
    try:
        seconds = time_each(call, batches, profile.device)
    finally:
        callback_handler.remove_start_callback(on_start)
    torch.compiler.reset()
    return {
        "calls": [
            {"length": n, "ms": s * 1e3, "graphs": g, "cudagraph_recordings": r}
            for n, s, g, r in zip(longest, seconds, graphs, recordings)
        ],
        "inductor_counters": {
            k: v - cudagraph_before.get(k, 0) for k, v in counters["inductor"].items() if "cudagraph" in k
        },
    }


def judge(speedup: dict) -> str:
    """``faster`` when the IQR of the per-trial speedups lies above 1, ``slower`` when below, else undecided."""
    if speedup["q1"] > 1:
        return "faster"
    return "slower" if speedup["q3"] < 1 else "not clearly different"


def describe(result: dict) -> str:
    """Readable lines for a notebook: per strategy, compiles, fallbacks, stream time and steady state."""
    s = result["stream"]
    lines = [
        f"stream: {s['steps']} batches of {s['batch']}, {s['distinct_lengths']} distinct longest lengths, "
        f"{s['tokens']} real tokens; recompile_limit={result['recompile_limit']}; backend {result['backend']}; "
        f"Inductor cache entries before the run: {result['compile_cache']['entries_before']} (0: cold start)"
    ]
    for r in result["strategies"]:
        lines.append(f"{r['name']:18s} {r['how']}")
        if r["compiled"]:
            lines.append(
                f"{'':18s} {r['frames']} backend compiles ({r['graphs']} graphs kept) for {r['shapes']} "
                f"shapes; {r['eager_fallback_calls']} calls ran no compiled code; recompile limit hit: "
                f"{r['recompile_limit_hit']}"
            )
        lines.append(
            f"{'':18s} whole stream {duration(r['stream_ms'])} (first call {duration(r['first_call_ms'])}); "
            f"steady pass {r['pass_ms']['median']:.3g} ms (IQR {r['pass_ms']['q1']:.3g}-"
            f"{r['pass_ms']['q3']:.3g}), {r['tokens_per_s']:,.0f} real tokens/s, padding {r['padding']:.0%}"
        )
        if "speedup" in r:
            x = r["speedup"]
            lines.append(
                f"{'':18s} vs eager: {x['median']:.2f}x (IQR {x['q1']:.2f}-{x['q3']:.2f}, "
                f"{x['trials']} interleaved trials) -> {judge(x)}"
            )
    return "\n".join(lines)


def results_doc(profile: Profile, result: dict) -> dict:
    """The JSON document: ``coursekit.results``' header plus the measurement."""
    return {**doc_header(profile, LESSON), **result}


def markdown_table(doc: dict) -> str:
    """One Markdown table of the strategies, headed by the device they were measured on."""
    s = doc["stream"]
    lines = [
        f"Measured on **{machine_label(doc)}**, profile `{doc['profile']['name']}`, torch {doc['torch']}, "
        f"backend `{doc['backend']}`, {doc['created']}. One seeded stream of {s['steps']} batches of {s['batch']} "
        f"sequences ({s['distinct_lengths']} distinct longest lengths, {s['tokens']} real tokens), inference. "
        "Compiles: backend calls counted by `CompileCounterWithBackend` (graphs kept in brackets); eager calls: calls "
        "that ran no compiled code; stream: the first pass, compiles included (Inductor's on-disk cache held "
        f"{doc['compile_cache']['entries_before']} entries before the run; 0 is a cold start; the strategies run in "
        "this order and share it, so a later one can reuse an earlier one's graph); steady pass: one more pass, "
        "median [q1-q3], interleaved with eager (`coursekit.timing.compare`), tokens/s from that median.",
        "",
        "| strategy | how | compiles | eager calls | limit hit | stream | first call | steady pass ms "
        "| real tokens/s | vs eager | padding |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in doc["strategies"]:
        p = r["pass_ms"]
        vs = f"{r['speedup']['median']:.2f}x ({judge(r['speedup'])})" if "speedup" in r else "-"
        if "eager_pass_ms" in r:  # the eager row was timed on its own; the ratio is against eager in these trials
            vs += f" vs eager {r['eager_pass_ms']['median']:.3g} ms in the same trials"
        compiles = f"{r['frames']} ({r['graphs']})" if r["compiled"] else "-"
        lines.append(
            f"| {r['name']} | {r['how']} | {compiles} | {r['eager_fallback_calls'] if r['compiled'] else '-'} "
            f"| {'yes' if r['recompile_limit_hit'] else 'no'} | {duration(r['stream_ms'])} "
            f"| {duration(r['first_call_ms'])} | {p['median']:.3g} [{p['q1']:.3g}-{p['q3']:.3g}] "
            f"| {r['tokens_per_s']:,.0f} | {vs} | {r['padding']:.0%} |"
        )
    if "packing" in doc:
        lines += ["", packing_table(doc["packing"])]
    return "\n".join(lines) + "\n"


def packing_table(packing: dict) -> str:
    """``measure_packing``'s two layouts as a Markdown table."""
    s = packing["speedup"]
    lines = [
        f"The same stream padded to buckets and packed into rows, both compiled with `dynamic=False` "
        f"(`{packing['backend']}`, {packing['graphs']} graphs); whole passes interleaved (`coursekit.timing.compare`): "
        f"packed vs buckets {s['median']:.2f}x [{s['q1']:.2f}-{s['q3']:.2f}]; largest output difference "
        f"{packing['max_abs_diff']:.1e}.",
        "",
        "| layout | steps | positions | padding | shapes | pass ms | real tokens/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in packing["layouts"]:
        p = r["pass_ms"]
        lines.append(
            f"| {r['layout']} | {r['steps']} | {r['tokens']} | {r['padding']:.0%} | {r['shapes']} "
            f"| {p['median']:.3g} [{p['q1']:.3g}-{p['q3']:.3g}] | {r['tokens_per_s']:,.0f} |"
        )
    return "\n".join(lines)


def print_table(doc: dict) -> None:
    """Print the strategies with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.width = max(console.width, 110)  # not a terminal (CI, a pipe): rich assumes 80 columns
    table = Table(
        title=f"lesson 4 dynamic shapes on {machine_label(doc)}, profile {doc['profile']['name']}, torch {doc['torch']}"
    )
    for col in ("strategy", "compiles", "eager calls", "limit hit", "stream", "steady ms", "tokens/s", "vs eager"):
        table.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
    for r in doc["strategies"]:
        table.add_row(
            r["name"],
            f"{r['frames']} ({r['graphs']})" if r["compiled"] else "-",
            str(r["eager_fallback_calls"]) if r["compiled"] else "-",
            "yes" if r["recompile_limit_hit"] else "no",
            duration(r["stream_ms"]),
            f"{r['pass_ms']['median']:.3g}",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['speedup']['median']:.2f}x" if "speedup" in r else "-",
        )
    console.print(table)


def run(profile: Profile, args: argparse.Namespace | None = None) -> dict:
    """The results document of ``python -m coursekit.bench --lesson dynamic_shapes``: the strategies, then packing
    against buckets."""
    return results_doc(profile, {**measure_dynamic_shapes(profile), "packing": measure_packing(profile)})
