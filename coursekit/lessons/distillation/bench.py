"""Measure lesson 3's figures (a ViT student distilled from a frozen teacher inside the loss) and record them.

The lesson notebook calls the pieces (:func:`measure_classifier`, :func:`measure_distillation`,
:func:`measure_modes`, :func:`probe_isolated`) and ``python -m coursekit.bench --lesson 3`` calls
:func:`measure_lesson3`, which runs them all, so the figures a learner sees and the recorded ones come from
the same code.  It reports

* the article's first experiment, a timm ViT classifier: eager and compiled, fp32 and bf16 autocast;
* the distillation step of every variant of ``coursekit.lessons.distillation.material.VARIANTS``, fp32, and bf16
  where the device has it in hardware;
* compile modes on the one-graph variant: default, reduce-overhead, and max-autotune on CUDA only;
* what a teacher run under ``torch.inference_mode()`` does to each variant (each in a fresh process).

Every step gets its first call (where a compiled step compiles its forward and backward) and its steady-state
median; a compiled step is timed interleaved with eager of the same dtype (``coursekit.timing.compare``), which
gives its step time, eager's in the same trials, the speedup with its IQR, and the steps after which compiling
has paid for itself (``StepTimes.breakeven_steps``).  Each compiled step starts after
``torch.compiler.reset()``, so its first call really compiles: Dynamo reuses a graph compiled for another
instance of the same class in the same process, which would make a first call look free.  The on-disk Inductor
cache is left alone and its hits are counted per row (a hit makes a compile much cheaper).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import torch
from torch._dynamo.utils import counters
from tqdm import tqdm

from coursekit.cache import CACHE_ENV, repo_root, use_repo_compile_cache
from coursekit.lessons.distillation.givens import shapes
from coursekit.lessons.distillation.material import VARIANTS, StepTimes, build, classifier_step, image_batch, measure
from coursekit.profile import DEVICE_ENV, PROFILE_ENV, Profile, apply_threads
from coursekit.results import doc_header, duration, machine_label
from coursekit.timing import Timing, compare, synchronize

LESSON = "lesson03"
DTYPES = {"fp32": False, "bf16": True}  # label -> autocast to bf16
MODES = ("default", "reduce-overhead", "max-autotune")
CUDA_ONLY_MODES = {
    "max-autotune": "runs only on CUDA: it benchmarks many candidate kernels for every matmul "
    "and multiplies the compile time, which a CPU smoke run cannot afford"
}
AUTOTUNE_ENV = "COURSEKIT_MAX_AUTOTUNE"
AUTOTUNE_OPT_IN = (
    f"opt-in: set {AUTOTUNE_ENV}=1 to measure it; it benchmarks candidate kernels for every matmul of the "
    "student and the teacher, forward and backward, so its first call can take many minutes"
)
ONE_GRAPH = "one graph"
Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _ms(timing: Timing) -> dict[str, float]:
    return {"median": timing.median_s * 1e3, "q1": timing.q1_s * 1e3, "q3": timing.q3_s * 1e3}


def cache_counts() -> dict[str, int]:
    """Inductor's FX-graph cache hits and misses so far in this process."""
    return {"hit": counters["inductor"]["fxgraph_cache_hit"], "miss": counters["inductor"]["fxgraph_cache_miss"]}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def eager_row(dtype: str, step: Step, profile: Profile) -> dict:
    """The eager step's first call and steady state (``material.measure``), as a results row."""
    times = measure(step, profile)
    return {"name": "eager", "dtype": dtype, "compiled": False, "first_s": times.first_s, "step_ms": _ms(times.step)}


def first_call_s(step: Step, profile: Profile, seed: int = 1000) -> float:
    """Seconds of the first call of ``step``: a compiled step compiles its forward and backward here."""
    batch = image_batch(profile, seed)
    synchronize(profile.device)
    start = time.perf_counter()
    step(*batch)
    synchronize(profile.device)
    return time.perf_counter() - start


def compiled_row(name: str, dtype: str, step: Step, eager: Step, eager_first_s: float, profile: Profile) -> dict:
    """A compiled step's first call, then its steady state timed interleaved with ``eager`` (same dtype).

    Step times, the speedup and the break-even steps all come from the interleaved trials
    (``coursekit.timing.compare``), so a slow patch on a shared machine hits both sides alike.
    """
    before = cache_counts()
    first = first_call_s(step, profile)
    fx_cache = _delta(cache_counts(), before)
    batches = [image_batch(profile, 2000 + i) for i in range(4)]
    ab = compare(
        eager,
        step,
        lambda i: batches[i % len(batches)],
        device=profile.device,
        trials=profile.trials,
        warmup=profile.warmup,
        min_sample_s=profile.min_sample_s,
    )
    breakeven = StepTimes(first, ab.candidate).breakeven_steps(StepTimes(eager_first_s, ab.baseline))
    return {
        "name": name,
        "dtype": dtype,
        "compiled": True,
        "first_s": first,
        "fx_cache": fx_cache,
        "step_ms": _ms(ab.candidate),
        "eager_ms": _ms(ab.baseline),
        "speedup": ab.baseline.median_s / ab.candidate.median_s,  # ratio of the two medians
        "ab": ab.speedup_summary(),
        "breakeven_steps": None if breakeven == float("inf") else breakeven,
    }


def judge(ab: dict) -> str:
    """``faster`` when the IQR of the per-trial speedups lies above 1, ``slower`` when below, else undecided."""
    if ab["q1"] > 1:
        return "faster"
    return "slower" if ab["q3"] < 1 else "not clearly different"


def true_fp32() -> str:
    """Make the fp32 rows true fp32 (TF32 off for matmuls and cuDNN convolutions) and say so, in a line to print.

    On Ampere and newer GPUs ``torch.set_float32_matmul_precision("high")`` lets fp32 matmuls run on TF32 tensor
    cores (10 mantissa bits instead of 23): several times faster, and then fp32 rows would measure something
    between fp32 and bf16. Inductor warns when TF32 is available and off; the lesson keeps it off on purpose."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    return (
        "fp32 rows are true fp32: torch.set_float32_matmul_precision('highest'), cudnn.allow_tf32 = False "
        "('high' would run fp32 matmuls on TF32 tensor cores on Ampere and newer GPUs: faster, 10-bit mantissas)"
    )


# what a CPU needs for bf16 matmuls in hardware (torch.cpu.get_capabilities()): AVX512-BF16 or AMX on x86, BF16 on Arm
BF16_CPU_FEATURES = ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16")


def bf16_native(profile: Profile) -> bool:
    """True where bf16 runs in hardware: a CUDA GPU from Ampere on, or a CPU with bf16 instructions
    (:data:`BF16_CPU_FEATURES`). Before Ampere (a T4, a V100) ``torch.cuda.is_bf16_supported()`` still says yes,
    because bf16 tensors work there, emulated: timing them would time the emulation, so the lesson asks
    ``including_emulation=False``. A CPU without the instructions (AVX2 only, as most laptops and CI machines)
    converts to and from fp32 around every bf16 matmul."""
    if profile.device_class == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    capabilities = torch.cpu.get_capabilities()
    return any(capabilities.get(name) is True for name in BF16_CPU_FEATURES)


def usable_dtypes(
    profile: Profile, dtypes: Iterable[str], emulated_on_cpu: bool = False, quiet: bool = False
) -> list[str]:
    """``dtypes`` less bf16 where the device has no bf16 in hardware (:func:`bf16_native`), printing why unless
    ``quiet``. ``emulated_on_cpu`` keeps bf16 on any CPU: the classifier shows, once, what bf16 autocast costs
    without it."""
    wanted = list(dtypes)
    if "bf16" not in wanted or bf16_native(profile):
        return wanted
    on_cpu = profile.device_class != "cuda"
    if on_cpu and emulated_on_cpu:
        return wanted
    if quiet:
        pass
    elif on_cpu:
        print(
            f"bf16 rows skipped: this CPU ({torch.cpu.get_capabilities().get('cpu_name', 'unnamed')}) has no bf16 "
            f"instructions ({', '.join(BF16_CPU_FEATURES)}), so bf16 would run emulated, as the classifier's bf16 "
            "row shows; the fp32 rows still run"
        )
    else:
        print(
            f"bf16 rows skipped: {torch.cuda.get_device_name()} has no bf16 in hardware (before Ampere), so bf16 "
            "would run emulated; the fp32 rows still run"
        )
    wanted.remove("bf16")
    return wanted


def find_row(rows: Sequence[dict], name: str, dtype: str) -> dict | None:
    """The row of ``name`` in ``dtype``, or None where that dtype was not run (bf16 on a GPU without it)."""
    return next((r for r in rows if r["name"] == name and r["dtype"] == dtype), None)


def gain(row: dict | None) -> str:
    """A compiled row's gain over eager of its dtype, for the lesson's tables: ``+12.3% (faster)``."""
    if row is None:
        return "not run on this device"
    return f"{(row['ab']['median'] - 1) * 100:+.1f}% ({judge(row['ab'])})"


def _bar(items: Sequence, desc: str, progress: bool, unit: str) -> tqdm:
    return tqdm(items, desc=desc, unit=unit, disable=not progress)


def measure_classifier(profile: Profile, dtypes: Iterable[str] = DTYPES, progress: bool = True) -> list[dict]:
    """The article's ViT classifier step, eager and compiled, for each of ``dtypes`` (``fp32``, ``bf16``). A CPU runs
    bf16 even without bf16 instructions: this is where the lesson shows what emulated bf16 autocast costs."""
    apply_threads(profile)
    use_repo_compile_cache()
    true_fp32()
    rows = []
    usable = usable_dtypes(profile, dtypes, emulated_on_cpu=True)
    for dtype in _bar(usable, "lesson 3 classifier", progress, "dtype"):
        amp = DTYPES[dtype]
        eager = classifier_step(profile, compiled=False, amp=amp)
        base = eager_row(dtype, eager, profile)
        torch.compiler.reset()
        step = classifier_step(profile, compiled=True, amp=amp)
        rows += [base, compiled_row("compiled", dtype, step, eager, base["first_s"], profile)]
    torch.compiler.reset()
    return rows


def measure_distillation(
    profile: Profile, variants: Iterable[str] = VARIANTS, dtypes: Iterable[str] = DTYPES, progress: bool = True
) -> list[dict]:
    """Every variant of ``VARIANTS`` (eager first) for each of ``dtypes`` the device runs in hardware
    (:func:`usable_dtypes`), compared with eager of that dtype."""
    apply_threads(profile)
    use_repo_compile_cache()
    true_fp32()
    names = ["eager", *(v for v in variants if v != "eager")]
    rows = []
    pairs = [(d, v) for d in usable_dtypes(profile, dtypes) for v in names]
    bar = _bar(pairs, "lesson 3 distillation", progress, "variant")
    for dtype, variant in bar:
        bar.set_postfix_str(f"{variant} {dtype}")
        amp = DTYPES[dtype]
        if variant == "eager":
            eager = build("eager", profile, amp=amp).step
            base = eager_row(dtype, eager, profile)
            rows.append({**base, "how": VARIANTS["eager"]})
            continue
        torch.compiler.reset()
        step = build(variant, profile, amp=amp).step
        rows.append({**compiled_row(variant, dtype, step, eager, base["first_s"], profile), "how": VARIANTS[variant]})
    torch.compiler.reset()
    return rows


def modes_dtype(profile: Profile) -> str:
    """The dtype the modes are compared in: bf16 on a GPU with bf16 hardware (the article's setting), else fp32 (a
    CPU, where bf16 autocast is slow eagerly, or an older GPU, where bf16 is emulated)."""
    return "bf16" if profile.device_class == "cuda" and bf16_native(profile) else "fp32"


def mode_skipped(mode: str, profile: Profile) -> str | None:
    """Why :func:`measure_modes` skips ``mode`` here (a CUDA-only mode on a CPU, max-autotune not opted into), or
    None where it runs."""
    if mode in CUDA_ONLY_MODES and profile.device_class != "cuda":
        return CUDA_ONLY_MODES[mode]
    if mode == "max-autotune" and os.environ.get(AUTOTUNE_ENV, "") not in ("1", "yes", "true"):
        return AUTOTUNE_OPT_IN
    return None


def compiled_steps(profile: Profile) -> dict[str, Callable[[], Step]]:
    """Every compiled step the lesson's measurements time on this device, by label, each built when called: the
    classifier's (:func:`measure_classifier`), each compiled distillation variant's (:func:`measure_distillation`)
    and each compile mode's other than the default (:func:`measure_modes`), with their default dtypes and modes.
    ``tools.warm_cache`` compiles them all (``warm.py``), so that the lesson's notebook finds them in a shipped cache.
    """
    classifier = usable_dtypes(profile, DTYPES, emulated_on_cpu=True, quiet=True)
    distillation = usable_dtypes(profile, DTYPES, quiet=True)  # why bf16 is skipped: the lesson says it
    steps: dict[str, Callable[[], Step]] = {}
    for dtype in classifier:
        steps[f"classifier, compiled, {dtype}"] = functools.partial(
            classifier_step, profile, compiled=True, amp=DTYPES[dtype]
        )
    for dtype in distillation:
        for variant in VARIANTS:
            if variant != "eager":
                steps[f"distillation, {variant}, {dtype}"] = functools.partial(_step, variant, profile, DTYPES[dtype])
    dtype = modes_dtype(profile)
    for mode in MODES:
        if mode != "default" and not mode_skipped(mode, profile):
            steps[f"distillation, {ONE_GRAPH}, {dtype}, mode={mode}"] = functools.partial(
                _step, ONE_GRAPH, profile, DTYPES[dtype], mode
            )
    return steps


def _step(variant: str, profile: Profile, amp: bool, mode: str | None = None) -> Step:
    """A new distillation step of ``variant`` (``build``, looked up when called, as the measurements do)."""
    return build(variant, profile, amp=amp, mode=mode).step


def measure_modes(
    profile: Profile,
    modes: Iterable[str] = MODES,
    dtype: str | None = None,
    reuse: Sequence[dict] = (),
    progress: bool = True,
) -> dict:
    """The one-graph step under each compile mode, with first call, step time and break-even steps.

    ``reuse`` takes rows from :func:`measure_distillation`: its eager row and its one-graph row (= the
    default mode) of the same dtype are used instead of measuring them again.  Modes in ``CUDA_ONLY_MODES``
    are skipped on a CPU, and ``max-autotune`` unless ``COURSEKIT_MAX_AUTOTUNE=1``, with the reason recorded.
    """
    apply_threads(profile)
    use_repo_compile_cache()
    true_fp32()
    dtype = dtype or modes_dtype(profile)
    amp = DTYPES[dtype]
    known = {r["name"]: r for r in reuse if r["dtype"] == dtype}
    eager = build("eager", profile, amp=amp).step
    base = known.get("eager") or eager_row(dtype, eager, profile)
    rows, skipped = [], {}
    for mode in _bar(list(modes), "lesson 3 compile modes", progress, "mode"):
        if reason := mode_skipped(mode, profile):
            skipped[mode] = reason
            continue
        if mode == "default" and ONE_GRAPH in known:
            rows.append({**known[ONE_GRAPH], "name": mode, "reused": True})
            continue
        torch.compiler.reset()
        skips = counters["inductor"]["cudagraph_skips"]
        step = build(ONE_GRAPH, profile, amp=amp, mode=None if mode == "default" else mode).step
        row = compiled_row(mode, dtype, step, eager, base["first_s"], profile)
        rows.append({**row, "reused": False, "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - skips})
    torch.compiler.reset()
    return {"variant": ONE_GRAPH, "dtype": dtype, "eager": base, "rows": rows, "skipped": skipped}


def error_summary(err: BaseException) -> str:
    """``Type: first line`` of an exception; a first line ending in ``:`` (as ``BackendCompilerFailed``'s
    does) gets the next line too."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
    text = lines[0] if not lines[0].endswith(":") or len(lines) < 2 else f"{lines[0]} {lines[1]}"
    return f"{type(err).__name__}: {text}"


def probe_teacher_mode(profile: Profile, variant: str, teacher_mode: str, seed: int = 0) -> dict:
    """Build ``variant`` with the teacher under ``teacher_mode`` and run one training step, in this process.

    A compile that fails under ``torch.inference_mode()`` can leave this process's dispatcher state broken
    (later tensor operations raise an internal assert; ``healthy_after`` checks): use :func:`probe_isolated`
    for variants that compile the teacher.
    """
    apply_threads(profile)
    start = time.perf_counter()
    try:
        build(variant, profile, teacher_mode=teacher_mode, seed=seed).step(*image_batch(profile, seed))
        synchronize(profile.device)  # the step's GPU work inside the time, as every other clock here
        outcome, ok = "ran", True
    except Exception as err:  # the point of the probe: report the failure instead of raising it
        outcome, ok = error_summary(err), False
    return {
        "variant": variant,
        "teacher_mode": teacher_mode,
        "ok": ok,
        "outcome": outcome,
        "seconds": time.perf_counter() - start,
        "healthy_after": tensors_work(),
    }


def tensors_work() -> bool:
    """Whether a plain tensor operation still works in this process (a failed compile can break it)."""
    try:
        return bool((torch.ones(2) + 1).sum() == 4)
    except RuntimeError:
        return False


_PROBE = (
    "import json, sys; from coursekit.cache import use_repo_compile_cache; use_repo_compile_cache(); "
    "from coursekit.lessons.distillation.bench import probe_teacher_mode; from coursekit.profile import get_profile; "
    "print(json.dumps(probe_teacher_mode(get_profile(), sys.argv[1], sys.argv[2])))"
)


def _probe_result(proc: subprocess.Popen, variant: str, teacher_mode: str, timeout: float) -> dict:
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    lines = out.strip().splitlines()
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    last = (err.strip().splitlines() or ["no output"])[-1]
    if timed_out:
        last = f"stopped after {timeout:g} s (a cold compile on a GPU can take longer: pass a larger timeout)"
    return {
        "variant": variant,
        "teacher_mode": teacher_mode,
        "ok": False,
        "seconds": None,
        "healthy_after": None,
        "outcome": f"child process exited with {proc.returncode}: {last}",
    }


def probe_isolated(
    profile: Profile, variants: Iterable[str] = VARIANTS, teacher_mode: str = "inference_mode", timeout: float = 600
) -> list[dict]:
    """:func:`probe_teacher_mode` for each variant, each in a fresh Python process: side by side on a CPU, one at
    a time on a GPU, after this process hands its cached memory back (each probe builds the full models)."""
    env = {**os.environ, PROFILE_ENV: profile.name, DEVICE_ENV: profile.device, CACHE_ENV: use_repo_compile_cache()}

    def start(variant: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", _PROBE, variant, teacher_mode],
            cwd=repo_root(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    if profile.device_class != "cuda":
        procs = [(v, start(v)) for v in variants]
        return [_probe_result(proc, v, teacher_mode, timeout) for v, proc in procs]
    results = []
    for v in variants:
        torch.cuda.empty_cache()
        results.append(_probe_result(start(v), v, teacher_mode, timeout))
    return results


def results_doc(profile: Profile, result: dict) -> dict:
    """The JSON document: ``coursekit.results``' header plus the measurement."""
    return {**doc_header(profile, LESSON), "sizes": dataclasses.asdict(shapes(profile)), **result}


def measure_lesson3(profile: Profile, progress: bool = True, probes: bool = True) -> dict:
    """Everything lesson 3 records (see the module docstring), as a results document."""
    classifier = measure_classifier(profile, progress=progress)
    distillation = measure_distillation(profile, progress=progress)
    modes = measure_modes(profile, reuse=distillation, progress=progress)
    teacher_modes = probe_isolated(profile) if probes else []
    return results_doc(
        profile,
        {"classifier": classifier, "distillation": distillation, "modes": modes, "teacher_modes": teacher_modes},
    )


def _first_call(row: dict) -> str:
    text = duration(row["first_s"] * 1e3)
    cache = row.get("fx_cache")
    return f"{text} (FX cache {cache['hit']} hit / {cache['miss']} miss)" if cache else text


def _breakeven(row: dict) -> str:
    if "breakeven_steps" not in row:
        return "-"
    n = row["breakeven_steps"]
    return "never (not faster)" if n is None else f"{n:,.0f} steps"


def describe_rows(rows: Sequence[dict]) -> str:
    """Readable lines for a notebook: per row, step time, first call, and the comparison with eager."""
    lines = []
    for r in rows:
        s = r["step_ms"]
        lines.append(
            f"{r['dtype']}  {r['name']:18s} step {s['median']:7.3g} ms (IQR {s['q1']:.3g}-{s['q3']:.3g})  "
            f"first call {_first_call(r)}"
        )
        if "ab" in r:
            ab = r["ab"]
            lines.append(
                f"{'':24s} vs eager {r['dtype']} ({r['eager_ms']['median']:.3g} ms in the same "
                f"{ab['trials']} interleaved trials): {ab['median']:.2f}x (IQR {ab['q1']:.2f}-{ab['q3']:.2f}) "
                f"-> {judge(ab)}; the compile pays for itself after {_breakeven(r)}"
            )
    return "\n".join(lines)


def describe_modes(modes: dict) -> str:
    """Readable lines for a notebook: each compile mode, and the modes skipped with the reason."""
    e = modes["eager"]
    lines = [
        f"{modes['variant']} variant, {modes['dtype']}; eager step {e['step_ms']['median']:.3g} ms",
        describe_rows(modes["rows"]),
    ]
    for r in modes["rows"]:
        if r.get("reused"):
            lines.append(f"  {r['name']}: the {modes['variant']} row of the distillation measurement")
        if r.get("cudagraph_skips"):
            lines.append(
                f"  {r['name']}: Inductor skipped CUDA graphs {r['cudagraph_skips']} time(s) (counter cudagraph_skips)"
            )
    lines += [f"  {mode}: skipped, {why}" for mode, why in modes["skipped"].items()]
    return "\n".join(lines)


def _health(probe: dict) -> str:
    return {True: "yes", False: "NO", None: "?"}[probe.get("healthy_after")]


def describe_probes(probes: Sequence[dict]) -> str:
    """One line per probed variant: ran, or the error's first line; and whether tensors still worked after."""
    return "\n".join(f"{p['variant']:18s} tensors work after: {_health(p):3s}  {p['outcome'][:150]}" for p in probes)


def _quartiles(ms: dict) -> str:
    return f"{ms['median']:.3g} [{ms['q1']:.3g}-{ms['q3']:.3g}]"


def _md_row(r: dict) -> str:
    eager = _quartiles(r["eager_ms"]) if "eager_ms" in r else "-"
    ab = f"{r['ab']['median']:.2f}x [{r['ab']['q1']:.2f}-{r['ab']['q3']:.2f}] {judge(r['ab'])}" if "ab" in r else "-"
    return (
        f"| {r['name']} | {r['dtype']} | {_quartiles(r['step_ms'])} | {eager} | {ab} | {_first_call(r)} "
        f"| {_breakeven(r)} |"
    )


TABLE_HEAD = [
    "| step | dtype | step ms | eager ms, same trials | speedup [IQR] | first call | break-even |",
    "| --- | --- | --- | --- | --- | --- | --- |",
]


def markdown_table(doc: dict) -> str:
    """Markdown tables (classifier, distillation, modes, teacher modes), headed by the device they were measured on."""
    p = doc["profile"]
    vits = doc.get("sizes", p)  # documents written before the sizes moved to the manifest kept them in the profile
    lines = [
        f"Measured on **{machine_label(doc)}**, profile `{p['name']}`, torch {doc['torch']}, {doc['created']}. "
        f"ViT batch {p['vit_batch']} of {p['vit_image']}x{p['vit_image']} images; student depth "
        f"{vits['student']['depth']}, teacher depth {vits['teacher']['depth']} (width {vits['teacher']['dim']}). "
        "Step: forward, loss, backward, optimiser; median [q1-q3] ms. A compiled step is timed interleaved with the "
        "eager step of the same dtype (`coursekit.timing.compare`): its step time, eager's in the same trials, and "
        "the speedup (median of per-trial ratios [IQR], with the verdict); an eager row's time is measured on its own. "
        "First call: the first step, where a compiled step compiles (each after `torch.compiler.reset()`; FX cache: "
        "Inductor's on-disk cache hits and misses during it). Break-even: steps after which the compile has paid for "
        "itself (extra first-call time / time saved per step).",
        "",
        "**ViT classifier (the article's first experiment)**",
        "",
        *TABLE_HEAD,
        *(_md_row(r) for r in doc["classifier"]),
        "",
        "**Distillation: a frozen teacher inside the loss**",
        "",
        *TABLE_HEAD,
        *(_md_row(r) for r in doc["distillation"]),
    ]
    modes = doc["modes"]
    lines += [
        "",
        f"**Compile modes ({modes['variant']}, {modes['dtype']})**",
        "",
        *TABLE_HEAD,
        *(_md_row(r) for r in modes["rows"]),
    ]
    lines += [f"\n{mode}: skipped, {why}." for mode, why in modes["skipped"].items()]
    if doc.get("teacher_modes"):
        lines += [
            "",
            "**Teacher under `torch.inference_mode()` (one step, each in a fresh process)**",
            "",
            "| variant | outcome | tensors work after |",
            "| --- | --- | --- |",
        ]
        lines += [
            f"| {t['variant']} | {t['outcome'].replace('|', chr(92) + '|')} | {_health(t)} |"
            for t in doc["teacher_modes"]
        ]
    return "\n".join(lines) + "\n"


def print_table(doc: dict) -> None:
    """Print the steps with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.width = max(console.width, 110)  # not a terminal (CI, a pipe): rich assumes 80 columns
    console.print(
        f"lesson 3 on {machine_label(doc)}, profile {doc['profile']['name']}, torch {doc['torch']}", style="bold"
    )
    sections = (
        ("classifier", doc["classifier"]),
        ("distillation", doc["distillation"]),
        (f"modes ({doc['modes']['variant']})", doc["modes"]["rows"]),
    )
    for title, rows in sections:
        table = Table(title=title)
        for col in ("step", "dtype", "ms", "eager ms", "speedup", "verdict", "1st call", "break-even"):
            table.add_column(col, justify="left" if col in ("step", "dtype", "verdict") else "right", no_wrap=True)
        for r in rows:
            compared = (
                [f"{r['eager_ms']['median']:.3g}", f"{r['ab']['median']:.2f}x", judge(r["ab"])]
                if "ab" in r
                else ["-", "-", "-"]
            )
            table.add_row(
                r["name"],
                r["dtype"],
                f"{r['step_ms']['median']:.3g}",
                *compared,
                duration(r["first_s"] * 1e3),
                _breakeven(r),
            )
        console.print(table)
    for mode, why in doc["modes"]["skipped"].items():
        console.print(f"{mode}: skipped, {why}")
    for t in doc.get("teacher_modes", []):
        console.print(f"inference_mode teacher, {t['variant']}: {t['outcome'][:120]}")


def run(profile: Profile, args: argparse.Namespace | None = None) -> dict:
    """The results document of ``python -m coursekit.bench --lesson distillation``."""
    return measure_lesson3(profile)
