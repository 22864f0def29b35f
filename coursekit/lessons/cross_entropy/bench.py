"""Lesson 1's figures: each rung of the cross-entropy ladder, measured and recorded.

The lesson notebook calls :func:`measure_rung` for each rung and the command
line (``python -m coursekit.bench --lesson 1``) calls :func:`measure_ladder`,
so the numbers a learner sees and the recorded ones come from the same code.
Each rung gets: the training-step time and the loss's forward+backward time
(``coursekit.training``), the host/device traffic of one loss call
(``coursekit.traffic``), the time of its very first call (where
``torch.compile`` compiles) and speedups against the first rung measured.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from tqdm import tqdm

from coursekit.cache import use_repo_compile_cache
from coursekit.lessons.cross_entropy.material import LADDER, build
from coursekit.lessons.cross_entropy.vocab import markdown_rows, measure_vocab, vocab_shape
from coursekit.profile import Profile, apply_threads
from coursekit.results import doc_header, duration, machine_label
from coursekit.timing import Timing, synchronize
from coursekit.traffic import Traffic, watch_traffic
from coursekit.training import LossFn, loss_inputs, time_loss, time_step

WARMUP_CALLS = 2  # the first call compiles the forward and the backward; the second runs them warm


def _quartiles(timing: Timing, scale: float) -> dict[str, float]:
    return {"median": timing.median_s * scale, "q1": timing.q1_s * scale, "q3": timing.q3_s * scale}


def first_calls(profile: Profile, loss_fn: LossFn, calls: int = WARMUP_CALLS, seed: int = 100) -> float:
    """Run ``calls`` loss forward+backward passes; return seconds taken by the first."""
    seconds = []
    for i in range(calls):
        logits, labels = loss_inputs(profile, seed + i)
        synchronize(profile.device)  # the inputs' copies finish before the clock starts
        start = time.perf_counter()
        loss_fn(logits, labels).backward()
        synchronize(profile.device)
        seconds.append(time.perf_counter() - start)
    return seconds[0]


def loss_traffic(profile: Profile, loss_fn: LossFn, seed: int = 200) -> Traffic:
    """Host/device traffic of one loss forward+backward on a warmed-up ``loss_fn``.

    ``watch_traffic`` installs a TorchFunctionMode, which a compiled function
    guards on: its first watched call recompiles, and compiling shows up as
    traffic.  One watched call is therefore thrown away before the counted one.
    """
    for _ in range(2):
        logits, labels = loss_inputs(profile, seed)
        with watch_traffic(profile.device) as traffic:
            loss_fn(logits, labels).backward()
    return traffic


def measure_rung(profile: Profile, name: str, seed: int = 0) -> dict:
    """Step time (ms), loss fwd+bwd time (us), traffic and first-call time of one rung."""
    apply_threads(profile)
    use_repo_compile_cache()
    loss_fn = build(name, profile.device)
    first_s = first_calls(profile, loss_fn)
    traffic = loss_traffic(profile, loss_fn)
    return {
        "name": name,
        "step_ms": _quartiles(time_step(profile, loss_fn, seed), 1e3),
        "loss_us": _quartiles(time_loss(profile, loss_fn, seed), 1e6),
        "syncs": traffic.sync_count,
        "host_tensors": traffic.host_tensor_count,
        "traffic": traffic.summary(),
        "first_call_ms": first_s * 1e3,
    }


def describe_rung(row: dict, baseline: dict | None = None) -> str:
    """A few readable lines for one measured rung; speedups when ``baseline`` (rung 0's row) is given."""
    s, lo = row["step_ms"], row["loss_us"]
    lines = [
        f"{row['name']}",
        f"  training step      {s['median']:8.3g} ms  (IQR {s['q1']:.3g}-{s['q3']:.3g})",
        f"  loss fwd+bwd       {lo['median']:8.3g} us  (IQR {lo['q1']:.3g}-{lo['q3']:.3g})",
        f"  first loss call    {duration(row['first_call_ms']):>11s}  (includes compiling, for compiled rungs)",
        f"  traffic per loss call: {row['traffic']}",
    ]
    if baseline is not None and baseline is not row:
        step_x = baseline["step_ms"]["median"] / s["median"]
        loss_x = baseline["loss_us"]["median"] / lo["median"]
        lines.append(f"  vs {baseline['name']}: step {step_x:.2f}x, loss {loss_x:.2f}x  (>1 is faster)")
    return "\n".join(lines)


def add_speedups(rows: list[dict]) -> list[dict]:
    """Add ``step_speedup`` and ``loss_speedup`` against the first row (rung 0), in place."""
    base = rows[0]
    for row in rows:
        row["step_speedup"] = base["step_ms"]["median"] / row["step_ms"]["median"]
        row["loss_speedup"] = base["loss_us"]["median"] / row["loss_us"]["median"]
    return rows


def measure_ladder(profile: Profile, names: Sequence[str] | None = None, progress: bool = True) -> list[dict]:
    """:func:`measure_rung` for each of ``names`` (default: all of ``LADDER``), with speedups."""
    names = list(names or LADDER)
    bar = tqdm(names, desc="ladder", unit="rung", disable=not progress)
    rows = []
    for name in bar:
        bar.set_postfix_str(name)
        rows.append(measure_rung(profile, name))
    return add_speedups(rows)


def results_doc(profile: Profile, rows: list[dict], vocab: list[dict] | None = None) -> dict:
    """Lesson 1's JSON document: the header, the baseline rung's name, the rungs and, when measured, the last
    rung's large-vocabulary losses (``vocab.measure_vocab``'s rows, with the shape they were measured at)."""
    doc = {**doc_header(profile, "lesson01"), "baseline": rows[0]["name"], "rungs": rows}
    if vocab is not None:
        tokens, classes = vocab_shape(profile)
        doc["large_vocab"] = {"tokens": tokens, "classes": classes, "variants": vocab}
    return doc


def markdown_table(doc: dict) -> str:
    """The rungs as a Markdown table, headed by the device it was measured on."""
    lines = [
        f"Measured on **{machine_label(doc)}**, profile `{doc['profile']['name']}`, "
        f"torch {doc['torch']}, {doc['created']}. Times: median [q1-q3]; speedups: ratios of medians measured "
        f"one rung after another (not interleaved) against `{doc['baseline']}`; traffic: profiler events over one "
        f"loss forward+backward (on a GPU one wait shows as several: the runtime's sync, the copy, sync debug "
        f"mode's warning); first call: the first loss forward+backward, where compiled rungs compile.",
        "",
        "| rung | step ms | step speedup | loss fwd+bwd us | loss speedup | sync events | host-built tensor events "
        "| first call |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in doc["rungs"]:
        s, lo = r["step_ms"], r["loss_us"]
        lines.append(
            f"| {r['name']} | {s['median']:.3g} [{s['q1']:.3g}-{s['q3']:.3g}] | {r['step_speedup']:.2f}x "
            f"| {lo['median']:.3g} [{lo['q1']:.3g}-{lo['q3']:.3g}] | {r['loss_speedup']:.2f}x "
            f"| {r['syncs']} | {r['host_tensors']} | {duration(r['first_call_ms'])} |"
        )
    if "large_vocab" in doc:
        vocab = doc["large_vocab"]
        lines += ["", f"Rung 9, {vocab['tokens']} tokens x {vocab['classes']} classes (float32 logits):", ""]
        lines.append(markdown_rows(vocab["variants"]))
    return "\n".join(lines) + "\n"


def print_table(doc: dict) -> None:
    """Print the rungs with rich."""
    from rich.console import Console
    from rich.table import Table

    title = f"lesson 1 ladder on {machine_label(doc)}, profile {doc['profile']['name']}, torch {doc['torch']}"
    table = Table(title=title)
    table.add_column("rung", no_wrap=True)
    for col in ("step ms", "step x", "loss us", "loss x", "syncs", "host-built", "1st call"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in doc["rungs"]:
        table.add_row(
            r["name"],
            f"{r['step_ms']['median']:.3g}",
            f"{r['step_speedup']:.2f}",
            f"{r['loss_us']['median']:.3g}",
            f"{r['loss_speedup']:.2f}",
            str(r["syncs"]),
            str(r["host_tensors"]),
            duration(r["first_call_ms"]),
        )
    console = Console()
    console.width = max(console.width, 110)  # not a terminal (CI, a pipe): rich assumes 80 columns
    console.print(table)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This bench's own options on ``python -m coursekit.bench``."""
    parser.add_argument("--rungs", nargs="*", choices=list(LADDER), help="lesson 1: measure only these rungs")


def run(profile: Profile, args: argparse.Namespace | None = None) -> dict:
    """The results document of ``python -m coursekit.bench --lesson 1`` (the large-vocabulary rung too, unless
    ``--rungs`` picked some of the ladder's)."""
    rungs = getattr(args, "rungs", None)
    vocab = None if rungs else measure_vocab(profile)[0]
    return results_doc(profile, measure_ladder(profile, rungs), vocab)
