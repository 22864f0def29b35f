"""Timing that survives noisy machines.

``time_per_call`` times one function; ``compare`` times a baseline and a
candidate *interleaved* on fresh inputs and reports the median of per-trial
ratios, which cancels slow drifts (thermal, other processes) that would bias
two separate measurements.  Every sample synchronises the device, runs enough
calls to lift it well above timer resolution, and is preceded by warm-up calls
(where ``torch.compile`` does its compiling).

``torch.utils.benchmark.Timer`` times one statement at a time and
``triton.testing.do_bench`` is GPU-only; neither interleaves two candidates on
shared fresh inputs, which is what an honest A/B ratio needs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

Args = Sequence[Any]
MAX_FRESH_CALLS = 256  # per timed sample in ``compare``: each call gets its own inputs
FRESH_INPUT_BUDGET_BYTES = 2 * 1024**3  # ... as long as those inputs (and their grads) fit in this budget


def synchronize(device: str | torch.device) -> None:
    """Wait for queued device work, so a host clock measures it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


_clock = time.perf_counter  # bound at import: patching time.perf_counter later cannot change it


def _sample(fn: Callable[..., Any], args: Args, calls: int, device: str) -> float:
    """Seconds per call over ``calls`` back-to-back calls."""
    synchronize(device)
    start = _clock()
    for _ in range(calls):
        fn(*args)
    synchronize(device)
    return (_clock() - start) / calls


def _sample_fresh(fn: Callable[..., Any], arg_sets: Sequence[Args], device: str) -> tuple[float, Any]:
    """Seconds per call over one call per argument set; also the last call's output."""
    synchronize(device)
    start = _clock()
    for args in arg_sets:
        out = fn(*args)
    synchronize(device)
    return (_clock() - start) / len(arg_sets), out


def calls_for(fn: Callable[..., Any], args: Args, device: str, min_sample_s: float) -> int:
    """How many calls make one sample last at least ``min_sample_s``."""
    once = max(_sample(fn, args, 1, device), 1e-7)
    return max(1, min(10_000, int(min_sample_s / once) + 1))


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median and interquartile range over samples."""

    median_s: float
    q1_s: float
    q3_s: float
    samples: int

    def as_dict(self) -> dict:
        return asdict(self)


def quartiles_of(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return med, q1, q3


def time_per_call(
    fn: Callable[..., Any],
    make_args: Callable[[int], Args],
    *,
    device: str,
    warmup: int = 2,
    samples: int = 7,
    min_sample_s: float = 0.01,
) -> Timing:
    """Time ``fn(*make_args(i))`` with fresh arguments for every sample."""
    for i in range(warmup):
        fn(*make_args(-1 - i))
    calls = calls_for(fn, make_args(0), device, min_sample_s)
    values = [_sample(fn, make_args(i), calls, device) for i in range(samples)]
    med, q1, q3 = quartiles_of(values)
    return Timing(med, q1, q3, samples)


@dataclass(frozen=True)
class Comparison:
    """Result of interleaved A/B timing: ``speedup`` = baseline time / candidate time."""

    speedup: float  # median of per-trial ratios
    speedup_q1: float
    speedup_q3: float
    baseline: Timing
    candidate: Timing
    trials: int
    timed_s: float = 0.0  # total seconds inside timed regions (to verify against an outside clock)

    def as_dict(self) -> dict:
        return {**asdict(self), "baseline": self.baseline.as_dict(), "candidate": self.candidate.as_dict()}

    def speedup_summary(self) -> dict:
        """The speedup as the lessons' results record it: median, quartiles and the number of trials."""
        return {"median": self.speedup, "q1": self.speedup_q1, "q3": self.speedup_q3, "trials": self.trials}


def _fresh_call_cap(args: Args) -> int:
    """How many fresh argument sets fit in the budget (tensors counted twice, for their gradients)."""
    nbytes = sum(2 * a.nbytes for a in args if isinstance(a, torch.Tensor)) or 1
    return max(1, min(MAX_FRESH_CALLS, FRESH_INPUT_BUDGET_BYTES // nbytes))


def compare(
    baseline: Callable[..., Any],
    candidate: Callable[..., Any],
    make_args: Callable[[int], Args],
    *,
    device: str,
    trials: int = 9,
    warmup: int = 2,
    min_sample_s: float = 0.01,
    check: Callable[[Any, Args], None] | None = None,
) -> Comparison:
    """Interleave ``baseline`` and ``candidate`` over ``trials`` trials of fresh inputs.

    ``make_args(i)`` must return new, deterministic arguments for each index.
    Every timed *call* gets its own argument set (made before timing), so
    caching results by input cannot help; the two functions alternate which
    goes first.  ``check(output, args)``, when given, is called outside the
    timed region on the candidate's last output of each trial, against a
    pristine copy of that call's arguments (made again), so stale, cached,
    lazy or input-corrupting results fail.
    """
    for i in range(warmup):
        args = make_args(-1 - i)
        baseline(*args)
        candidate(*args)
    first = make_args(0)
    cap = _fresh_call_cap(first)
    calls_a = min(calls_for(baseline, first, device, min_sample_s), cap)
    calls_b = min(calls_for(candidate, first, device, min_sample_s), cap)
    times_a: list[float] = []
    times_b: list[float] = []
    ratios: list[float] = []
    timed = 0.0
    for trial in range(trials):
        base = (trial + 1) * 100_003
        sets_a = [make_args(base + j) for j in range(calls_a)]
        sets_b = [make_args(base + j) for j in range(calls_b)]
        if trial % 2:
            b, out = _sample_fresh(candidate, sets_b, device)
            a, _ = _sample_fresh(baseline, sets_a, device)
        else:
            a, _ = _sample_fresh(baseline, sets_a, device)
            b, out = _sample_fresh(candidate, sets_b, device)
        if check is not None:
            check(out, make_args(base + calls_b - 1))
        del sets_a, sets_b
        timed += a * calls_a + b * calls_b
        times_a.append(a)
        times_b.append(b)
        ratios.append(a / b)
    med, q1, q3 = quartiles_of(ratios)
    return Comparison(
        speedup=med,
        speedup_q1=q1,
        speedup_q3=q3,
        baseline=Timing(*quartiles_of(times_a), trials),
        candidate=Timing(*quartiles_of(times_b), trials),
        trials=trials,
        timed_s=timed,
    )


def time_each(fn: Callable[..., Any], arg_sets: Sequence[Args], device: str) -> list[float]:
    """Seconds of each single call ``fn(*args)``, in order: a latency timeline (no warm-up, so the
    first calls of a compiled function include compiling, and a call that recompiles shows as a spike)."""
    return [_sample_fresh(fn, [args], device)[0] for args in arg_sets]
