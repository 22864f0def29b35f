"""Measure lesson 2's graph breaks and record the figures.

The lesson notebook and ``python -m coursekit.bench --lesson 2`` both call
:func:`measure_graph_breaks`, so the figures a learner sees and the recorded
ones come from the same code.  It reports

* for every variant of ``coursekit.lessons.graph_breaks.material``: graphs, breaks and break
  reasons from ``torch._dynamo.explain`` on the installed torch;
* for the training step of eager ``FixedNet``, compiled ``BrokenNet`` and
  compiled ``FixedNet``: the first two calls (compiling, and for ``BrokenNet``
  a recompile), the graphs compiled, the host/device traffic of one step, and
  interleaved A/B step-time comparisons (``coursekit.timing.compare``).

Files are written by ``coursekit.results.write_results`` as
``lesson02-<profile>-<device>-torch<version>.{json,md}``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

from coursekit.cache import use_repo_compile_cache
from coursekit.data import fake_cifar_batch
from coursekit.explain import explain_counts
from coursekit.lessons.graph_breaks.material import VARIANTS, build
from coursekit.profile import Profile, apply_threads
from coursekit.results import doc_header, duration, machine_label
from coursekit.timing import compare, synchronize
from coursekit.traffic import Traffic, host_reads_under_compile, watch_traffic
from coursekit.training import train_step

LESSON = "lesson02"
BROKEN, FIXED = "0 broken", "4 fixed"
STEPS = {"eager": None, "compiled broken": BROKEN, "compiled fixed": FIXED}  # label -> compiled variant
PAIRS = (("eager", "compiled broken"), ("eager", "compiled fixed"), ("compiled broken", "compiled fixed"))
ALLOW_INSIDE = ("lesson02::",)  # the custom op's own host round trip is its known price
Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def explain_variants(profile: Profile, images: torch.Tensor, names: list[str] | None = None) -> list[dict]:
    """:func:`explain_counts` of each variant's forward (default: all of ``VARIANTS`` and ``"logged"``)."""
    return [{"name": n, **explain_counts(build(n, profile), images)} for n in names or [*VARIANTS, "logged"]]


def training_step(model: nn.Module) -> Step:
    """``train_step`` with cross-entropy and SGD for ``model`` (eager or compiled)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    return lambda x, y: train_step(model, loss_fn, optimizer, x, y)


def first_calls_ms(step: Step, batches: list, device: str, calls: int = 2) -> list[float]:
    """Milliseconds of each of the first ``calls`` steps: compiling happens here."""
    times = []
    for x, y in batches[:calls]:
        synchronize(device)  # nothing queued before the clock starts
        start = time.perf_counter()
        step(x, y)
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def step_traffic(step: Step, batch: tuple, device: str) -> Traffic:
    """Traffic of one step, outside the custom op; the first watched call recompiles (mode guard) and is dropped.
    ``.numpy()`` and ``.tolist()`` are counted only where :func:`host_reads_under_compile` says they can be."""
    for _ in range(2):
        with watch_traffic(device, allow_inside=ALLOW_INSIDE, host_reads=host_reads_under_compile()) as traffic:
            step(*batch)
    return traffic


def _ms(timing) -> dict[str, float]:
    return {"median": timing.median_s * 1e3, "q1": timing.q1_s * 1e3, "q3": timing.q3_s * 1e3}


def measure_graph_breaks(profile: Profile, backend: str = "inductor", seed: int = 0) -> dict:
    """Explain every variant, then time and inspect the three training steps (see the module docstring).

    Importing ``torch._dynamo`` (this module does) fixes Inductor's cache folder to its default unless
    ``TORCHINDUCTOR_CACHE_DIR`` is already set: call ``use_repo_compile_cache()`` before importing this
    module to use the repository's cache.
    """
    apply_threads(profile)
    use_repo_compile_cache()
    torch.compiler.reset()
    batches = [fake_cifar_batch(profile, seed + i) for i in range(4)]
    variants = explain_variants(profile, batches[0][0])
    steps: dict[str, Step] = {}
    compiled: dict[str, dict] = {}
    for label, name in STEPS.items():
        model = build(name or FIXED, profile, seed)
        if name is None:
            steps[label] = training_step(model)
            continue
        counter = CompileCounterWithBackend(backend)
        steps[label] = training_step(torch.compile(model, backend=counter))
        first, second = first_calls_ms(steps[label], batches, profile.device)
        compiled[label] = {"variant": name, "first_call_ms": first, "second_call_ms": second, "counter": counter}
    comparisons = []
    for base, cand in PAIRS:
        ab = compare(
            steps[base],
            steps[cand],
            lambda i: batches[i % len(batches)],
            device=profile.device,
            trials=profile.trials,
            warmup=profile.warmup,
            min_sample_s=profile.min_sample_s,
        )
        comparisons.append(
            {
                "baseline": base,
                "candidate": cand,
                "speedup": ab.speedup,
                "speedup_q1": ab.speedup_q1,
                "speedup_q3": ab.speedup_q3,
                "baseline_ms": _ms(ab.baseline),
                "candidate_ms": _ms(ab.candidate),
                "trials": ab.trials,
            }
        )
    for row in compiled.values():  # read before step_traffic, whose watched calls recompile
        row["graphs_compiled"] = row.pop("counter").frame_count
    step_ms = {
        "eager": comparisons[0]["baseline_ms"],
        "compiled broken": comparisons[0]["candidate_ms"],
        "compiled fixed": comparisons[1]["candidate_ms"],
    }
    rows = []
    for label, name in STEPS.items():
        traffic = step_traffic(steps[label], batches[0], profile.device)
        rows.append(
            {
                "name": label,
                "variant": name or FIXED,
                "compiled": name is not None,
                "step_ms": step_ms[label],
                "syncs": traffic.sync_count,
                "host_tensors": traffic.host_tensor_count,
                "traffic": traffic.summary(),
                **compiled.get(label, {}),
            }
        )
    torch.compiler.reset()
    return {
        "backend": backend,
        "variants": variants,
        "steps": rows,
        "comparisons": comparisons,
        "host_reads_counted": host_reads_under_compile(),
    }


def judge(comparison: dict) -> str:
    """``faster`` when the IQR of the per-trial speedups lies above 1, ``slower`` when below, else undecided."""
    if comparison["speedup_q1"] > 1:
        return "faster"
    return "slower" if comparison["speedup_q3"] < 1 else "not clearly different"


def describe(result: dict) -> str:
    """Readable lines for a notebook: the steps, then the interleaved comparisons."""
    lines = []
    for r in result["steps"]:
        s = r["step_ms"]
        lines.append(f"{r['name']:16s} step {s['median']:7.3g} ms (IQR {s['q1']:.3g}-{s['q3']:.3g})")
        if r["compiled"]:
            lines.append(
                f"{'':16s} {r['graphs_compiled']} graphs compiled; first call "
                f"{duration(r['first_call_ms'])}, second {duration(r['second_call_ms'])}"
            )
        lines.append(f"{'':16s} traffic per step: {r['traffic']}")
    if not result.get("host_reads_counted", True):
        lines.append(
            f"(torch {torch.__version__}: .numpy() and .tolist() are not counted here; its Dynamo cannot trace "
            "NumPy code under the mode that counts them. On a CPU they copy nothing; on a GPU the .cpu() before "
            "them still shows as a Memcpy DtoH.)"
        )
    for c in result["comparisons"]:
        lines.append(
            f"{c['candidate']} vs {c['baseline']}: {c['speedup']:.2f}x "
            f"(IQR {c['speedup_q1']:.2f}-{c['speedup_q3']:.2f}, {c['trials']} interleaved trials) "
            f"-> {c['candidate']} is {judge(c)}"
        )
    return "\n".join(lines)


def results_doc(profile: Profile, result: dict) -> dict:
    """The JSON document: ``coursekit.results``' header plus the measurement."""
    return {**doc_header(profile, LESSON), **result}


def markdown_table(doc: dict) -> str:
    """Three Markdown tables (variants, steps, comparisons), headed by the device they were measured on."""
    lines = [
        f"Measured on **{machine_label(doc)}**, profile `{doc['profile']['name']}`, torch {doc['torch']}, "
        f"backend `{doc['backend']}`, {doc['created']}. Graphs and breaks: `torch._dynamo.explain` of one forward. "
        "Step: forward, loss, backward and SGD; median [q1-q3] from the interleaved comparisons (eager and compiled "
        "broken from the first, compiled fixed from the second: judge differences by the verdicts); traffic: "
        "profiler events over one step outside the `lesson02::` custom op (on a GPU one wait shows as several).",
        "",
        "| variant | graphs | breaks | break reasons |",
        "| --- | --- | --- | --- |",
    ]
    for v in doc["variants"]:
        reasons = "<br>".join(r.replace("|", "\\|") for r in v["reasons"]) or "-"
        lines.append(f"| {v['name']} | {v['graphs']} | {v['breaks']} | {reasons} |")
    lines += [
        "",
        "| training step | step ms | graphs compiled | first call | second call | sync events "
        "| host-built tensor events |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in doc["steps"]:
        s = r["step_ms"]
        compiled = (
            [str(r["graphs_compiled"]), duration(r["first_call_ms"]), duration(r["second_call_ms"])]
            if r["compiled"]
            else ["-", "-", "-"]
        )
        lines.append(
            f"| {r['name']} ({r['variant']}) | {s['median']:.3g} [{s['q1']:.3g}-{s['q3']:.3g}] | "
            f"{' | '.join(compiled)} | {r['syncs']} | {r['host_tensors']} |"
        )
    lines += ["", "| candidate vs baseline | speedup [IQR] | verdict | trials |", "| --- | --- | --- | --- |"]
    for c in doc["comparisons"]:
        lines.append(
            f"| {c['candidate']} vs {c['baseline']} | {c['speedup']:.2f}x "
            f"[{c['speedup_q1']:.2f}-{c['speedup_q3']:.2f}] | {judge(c)} | {c['trials']} |"
        )
    return "\n".join(lines) + "\n"


def print_table(doc: dict) -> None:
    """Print the steps and comparisons with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.width = max(console.width, 110)  # not a terminal (CI, a pipe): rich assumes 80 columns
    title = f"lesson 2 graph breaks on {machine_label(doc)}, profile {doc['profile']['name']}, torch {doc['torch']}"
    console.print(title, style="bold")
    variants = Table()
    for col in ("variant", "graphs", "breaks"):
        variants.add_column(col, justify="left" if col == "variant" else "right")
    for v in doc["variants"]:
        variants.add_row(v["name"], str(v["graphs"]), str(v["breaks"]))
    console.print(variants)
    steps = Table()
    for col in ("training step", "ms", "graphs compiled", "1st call", "2nd call", "syncs", "host-built"):
        steps.add_column(col, justify="left" if col == "training step" else "right", no_wrap=True)
    for r in doc["steps"]:
        extra = (
            [str(r["graphs_compiled"]), duration(r["first_call_ms"]), duration(r["second_call_ms"])]
            if r["compiled"]
            else ["-", "-", "-"]
        )
        steps.add_row(r["name"], f"{r['step_ms']['median']:.3g}", *extra, str(r["syncs"]), str(r["host_tensors"]))
    console.print(steps)
    for c in doc["comparisons"]:
        console.print(
            f"{c['candidate']} vs {c['baseline']}: {c['speedup']:.2f}x [{c['speedup_q1']:.2f}-"
            f"{c['speedup_q3']:.2f}] over {c['trials']} interleaved trials: {judge(c)}"
        )


def run(profile: Profile, args: argparse.Namespace | None = None) -> dict:
    """The results document of ``python -m coursekit.bench --lesson graph_breaks``."""
    return results_doc(profile, measure_graph_breaks(profile))
