"""Lesson 1's last rung: a language model's token loss, where the classes are a vocabulary of tens of thousands.

The ladder's loss has ten classes, so its logits are tiny and compiling it can only save launches. A language
model's loss has one row of logits per token and one column per vocabulary entry, and there the logits, the
log-probabilities eager computes from them and their gradient are the largest tensors of the step. This module
builds that case at the profile's sizes (the manifest's ``large_vocab``), times eager against compiled, and
measures each variant's peak memory with :func:`coursekit.peak_memory.peak_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import profile as Profiler

from coursekit.lessons import lesson
from coursekit.peak_memory import MIB, peak_bytes
from coursekit.profile import Profile
from coursekit.timing import Comparison, compare
from coursekit.training import loss_inputs

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def handwritten_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy written out: a stable log-softmax (through ``logsumexp``), then each target's entry."""
    log_probs = logits - logits.logsumexp(dim=-1, keepdim=True)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).mean()


VARIANTS: dict[str, Callable[[], Loss]] = {  # name -> a fresh loss (a fresh compile for the compiled ones)
    "eager built-in": lambda: F.cross_entropy,
    "compiled built-in": lambda: torch.compile(F.cross_entropy, fullgraph=True),
    "eager hand-written": lambda: handwritten_cross_entropy,
    "compiled hand-written": lambda: torch.compile(handwritten_cross_entropy, fullgraph=True),
}
PAIRS = [("eager built-in", "compiled built-in"), ("eager hand-written", "compiled hand-written")]


def vocab_shape(profile: Profile) -> tuple[int, int]:
    """(tokens, classes) of the large-vocabulary loss on ``profile``."""
    sizes = lesson("cross_entropy").sizes_for(profile.name)["large_vocab"]
    return sizes["tokens"], sizes["classes"]


def vocab_inputs(profile: Profile, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh logits (a leaf that requires grad, float32) and target token ids, on the profile's device."""
    tokens, classes = vocab_shape(profile)
    return loss_inputs(replace(profile, num_classes=classes), seed, rows=tokens)


def forward_backward(loss: Loss) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One training use of ``loss``: forward, then backward into the logits' ``.grad``."""
    return lambda logits, targets: loss(logits, targets).backward()


def measure_vocab(profile: Profile) -> tuple[list[dict], dict[str, Comparison]]:
    """Each variant's median forward+backward time and peak memory, and each eager/compiled pair's A/B timing.

    Every pair is timed interleaved on the same fresh inputs (:func:`coursekit.timing.compare`; its warm-up
    calls compile). Peak memory is measured on one more call with fresh inputs whose gradient is not yet
    allocated, so every variant's peak includes the one logits-sized gradient that any of them must write.
    """
    losses = {name: make() for name, make in VARIANTS.items()}
    timings: dict[str, float] = {}
    pairs: dict[str, Comparison] = {}
    for eager, compiled in PAIRS:
        ab = compare(
            forward_backward(losses[eager]),
            forward_backward(losses[compiled]),
            lambda i: vocab_inputs(profile, seed=1000 + i),
            device=profile.device,
            trials=profile.trials,
            warmup=profile.warmup,
            min_sample_s=profile.min_sample_s,
        )
        pairs[compiled] = ab
        timings[eager], timings[compiled] = ab.baseline.median_s, ab.candidate.median_s
    tokens, classes = vocab_shape(profile)
    logits_mib = tokens * classes * 4 / MIB  # float32
    rows = []
    for name, loss in losses.items():
        logits, targets = vocab_inputs(profile, seed=0)
        peak = peak_bytes(lambda: forward_backward(loss)(logits, targets), profile.device) / MIB  # noqa: B023
        rows.append({"variant": name, "ms": timings[name] * 1e3, "peak_mib": peak, "peak_in_logits": peak / logits_mib})
    return rows, pairs


def inductor_kernels(prof: Profiler) -> list[tuple[str, int, float]]:
    """The kernels Inductor generated, as a profile recorded them: (name, calls, total microseconds).

    Triton kernels (GPU) are named ``triton_<kind>_fused_<ops>_<n>`` and timed on the device; C++ kernels (CPU)
    appear as ``graph_<g>_cpp_fused_<ops>_<n>`` only when ``cpp.enable_kernel_profile`` was on at compile time.
    Each Triton kernel is listed once: a CUDA profile records it twice under its name, the CPU-side launch and the
    kernel on the device (the H200 run listed every kernel twice), and only the device's record is kept.
    """
    averages = list(prof.key_averages())
    on_device = {e.key for e in averages if e.key.startswith("triton_") and e.device_type != DeviceType.CPU}
    found = []
    for event in averages:
        if event.key.startswith("triton_"):
            if event.key in on_device and event.device_type == DeviceType.CPU:
                continue  # the launch, whose kernel the device's record times
            found.append((event.key, event.count, event.self_device_time_total))
        elif "cpp_fused" in event.key:
            found.append((event.key, event.count, event.self_cpu_time_total))
    return found


def markdown_rows(rows: list[dict]) -> str:
    """:func:`measure_vocab`'s rows as a Markdown table."""
    lines = ["| variant | fwd+bwd ms (median) | peak MiB | peak / logits |", "|---|---:|---:|---:|"]
    lines += [f"| {r['variant']} | {r['ms']:.3g} | {r['peak_mib']:.0f} | {r['peak_in_logits']:.2f} |" for r in rows]
    return "\n".join(lines)
