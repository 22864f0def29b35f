"""Speed, measured where learner code cannot bend it: on the judge's clock, against a baseline it runs itself.

``compare`` times the grader's baseline (a function in this process, which never runs learner code) and
the learner's function (staged in the worker by a probe), interleaved trial by trial, as the median of
per-trial ratios:

* **Same work on both sides.** The judge sends the inputs once (``timing.stage``); each timed sample then
  sends only a schedule, which staged input each call takes, and a seed from which both sides draw a secret
  factor for every column of each call's floating-point tensors (``grader.probing.run_schedule`` and
  ``multipliers``, which the baseline runs too, inside its timed sample). No output can be computed before its
  schedule arrives, no input can be cached, and no output is a function of few enough numbers to be tabulated
  ahead (one factor a call was: red team, session 33). Each call's factors also hang on the fingerprint of the
  call before it (``grader.probing.link``), so a sample's calls run one after another and cannot be batched
  (they were, by hand-written code: red team 2, session 33). Schedules come from the operating
  system's random source (``random.SystemRandom``): a seeded generator's thousands of draws, which the worker
  sees, would let it work out the next ones (red team, session 30).
* **The candidate on the judge's clock.** A candidate sample lasts from sending the schedule to receiving
  the answer, which the worker sends after synchronising its device; the answer carries the last output,
  which the judge checks against its own reference for that very input, and every call's fingerprint
  (``grader.probing.fingerprint``), of which the judge recomputes calls it picks only after the answer
  arrived, so a sample whose calls were skipped shows, and every call of ``WHOLE_SAMPLES`` samples it picked in
  secret: a forged fingerprint would split a chain in two that could run side by side, and code that did so in
  most samples (as raising the median needs) is caught with odds of at least 1 - 2**-WHOLE_SAMPLES. A
  candidate that keeps state (a training step, whose loss depends on every step before it) is timed in
  lockstep: the baseline trains on every schedule the candidate gets, in the same order, and every call's
  fingerprint must match. The round trip (well under a millisecond) counts against the learner, never for.
* **The baseline with the learner frozen.** While the judge times its baseline, every learner process is
  stopped (``SIGSTOP``; ``grader.containment``), so no thread, hook or child process of the learner's can
  slow it down. On CUDA the judge then waits until the GPU is idle before its clock starts: kernels a
  learner queued before being stopped would otherwise share the GPU (``wait_for_idle_gpu``).
* **Both sides on the same cores.** From the warm-up on, the judge and every learner thread run on the same
  ``threads`` cores (``grader.containment.same_cores``): a virtual machine's cores can differ in speed by a
  third or more for seconds at a time, and a ratio of two different cores' times measures them, not the code.
* **Compiles before the clock.** Both sides first run every input set at both ends of the secret scale, so
  each branch, shape and recompile a schedule can reach happens untimed. The judge's compile state starts
  empty in every comparison (``torch.compiler.reset``), as a fresh worker's does: a batch reuses judge
  processes, and what an earlier job compiled must not change this one's baseline.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from coursekit.timing import Timing, quartiles_of, synchronize
from grader.containment import timing_cores
from grader.probing import REACH, Scale, chained, run_schedule, seeded, transform, warm_chain
from grader.protocol import Answer

IDLE_GPU_LATENCY_S = 0.002  # a tiny kernel that takes longer than this is sharing the GPU with another context
IDLE_GPU_WAIT_S = 10.0
MAX_CALLS = 10_000
FINGERPRINT_RTOL = 1e-3  # L1 norms of float32 values, computed by two implementations of the same maths
SPOT_CHECKS = 2  # calls per timed sample whose fingerprints the judge recomputes
WHOLE_SAMPLES = 3  # timed samples per comparison, picked in secret, whose every call the judge recomputes
CORE_SLACK, CORE_SLACK_S = 1.25, 0.005  # CPU time a timed sample may use: its cores' share of its time, and a margin


class BusyDevice(AssertionError):
    """The GPU stayed busy while every learner process was stopped: learner work was still queued on it."""


@dataclass(frozen=True)
class Sample:
    """A timed sample's calls, ``(input set, factor)`` each, and the seed of their factors per column (None: each
    call's one factor, as in the untimed first call that runs every set at both ends of ``REACH``)."""

    calls: list[tuple[int, Scale]]
    seed: int | None = None
    chain: bool = False  # each call's factors also hang on the fingerprint of the call before it (``probing.link``)


@dataclass(frozen=True)
class Comparison:
    """Interleaved timing: ``speedup`` = baseline seconds per call / candidate seconds per call."""

    speedup: float  # median of per-trial ratios
    speedup_q1: float
    speedup_q3: float
    baseline: Timing
    candidate: Timing
    trials: int
    frozen: int  # learner processes stopped while the baseline ran (the last trial)
    low: float = 0.0  # a 95% confidence interval of the median ratio
    high: float = 0.0


def median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median of ``values`` (order statistics)."""
    ordered = sorted(values)
    n = len(ordered)
    half = 0.98 * n**0.5
    lo = max(0, int(n / 2 - half) - 1)
    hi = min(n - 1, int(n / 2 + 1 + half + 0.999) - 1)
    return ordered[lo], ordered[hi]


def wait_for_idle_gpu(device: str) -> None:
    """On CUDA, wait until a tiny kernel runs without sharing the GPU (learner kernels queued before the freeze
    have drained); ``BusyDevice`` if that takes longer than ``IDLE_GPU_WAIT_S``. A no-op on CPU."""
    if torch.device(device).type != "cuda":
        return
    x = torch.ones(1, device=device)
    give_up = time.monotonic() + IDLE_GPU_WAIT_S
    while True:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        x.add_(0)
        torch.cuda.synchronize(device)
        if time.perf_counter() - start < IDLE_GPU_LATENCY_S:
            return
        if time.monotonic() > give_up:
            raise BusyDevice(
                "the GPU stayed busy while every learner process was stopped: work your code queued "
                "kept running while the grader timed its baseline. Synchronise before you return."
            )
        time.sleep(0.01)


@contextlib.contextmanager
def same_cores(learner, threads: int) -> Iterator[int]:
    """The judge and ``learner``'s processes on the same ``threads`` cores inside the block, and the judge's
    torch on ``threads`` threads, as each worker's is (more threads than cores would spin against each other).
    Yields how many cores they are pinned to: fewer than ``threads`` where fewer are allowed (``time_once``'s
    ``cores``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    cores = timing_cores(threads)
    try:
        with learner.same_cores(cores):
            yield len(cores)
    finally:
        torch.set_num_threads(before)


def _time_local(
    fn: Callable[..., Any],
    staged: list[tuple],
    sample: Sample,
    grads: tuple[bool, ...],
    device: str,
    params: tuple = (),
) -> tuple[float, Any]:
    synchronize(device)
    start = time.perf_counter()
    # the factors and the fingerprints too: the same work as the worker's
    out = run_schedule(fn, staged, sample.calls, grads, params, sample.seed, sample.chain)
    synchronize(device)
    return time.perf_counter() - start, out


def check_record(prints: torch.Tensor, shape: tuple[int, ...]) -> None:
    """The worker's per-call fingerprints must have ``shape`` (one row for every call of the sample), in float32,
    finite and not negative, as L1 norms are: the judge chains each call's factors from the row before it, and a
    forged nan there would make its reference for the next call nan too, which the last-output check (nan equals
    nan) would pass."""
    if tuple(prints.shape) != tuple(shape) or prints.dtype != torch.float32:
        raise AssertionError(
            f"the timed calls' record has shape {tuple(prints.shape)}, not {tuple(shape)}, or dtype {prints.dtype}, "
            "not float32: every call of a timed sample leaves one row, unless code rewrote the grader's timing"
        )
    if not bool(torch.isfinite(prints).all()) or bool((prints < 0).any()):
        raise AssertionError(
            "the timed calls' record holds nan, inf or a negative norm: a timed call's output or gradients were "
            "not finite, or code rewrote the grader's timing"
        )


def check_fingerprints(
    prints: torch.Tensor,
    schedule: Sequence[tuple[int, Scale]],
    want: Callable[[tuple[int, Scale]], torch.Tensor],
    picks: list[int],
) -> None:
    """The worker's per-call fingerprints (``[calls, 2]``) must cover ``schedule`` and match ``want(entry)`` at
    ``picks``, positions the judge chose after the answer arrived."""
    check_record(prints, (len(schedule), 2))
    for j in picks:
        expected = want(schedule[j]).double().cpu()
        got = prints[j].double()
        if not torch.allclose(got, expected, rtol=FINGERPRINT_RTOL, atol=1e-6):
            raise AssertionError(
                f"call {j + 1} of {len(schedule)} in a timed sample did not compute what it should during timing "
                f"(L1 norms of output and gradients {got.tolist()} against {expected.tolist()}): "
                "every call's result is checked, at random, after the sample. Does your code skip or change calls "
                "while it is timed?"
            )


def linked(calls: list[tuple[int, Scale]], prints: torch.Tensor) -> Sequence[tuple[int, Scale]]:
    """``calls`` (seeded) with each call's factors chained to the fingerprint ``prints`` reports for the call
    before it, as ``run_schedule`` chained them in the worker: the judge recomputes a picked call from its
    predecessor's reported fingerprint, so a sample whose calls did not run one after another, each on what the one
    before it computed, fails its spot checks (and a reported fingerprint that was not computed fails its own)."""
    check_record(prints, (len(calls), 2))
    return _Linked(calls, prints)


class _Linked(Sequence):
    """``linked``'s calls, each chained when it is read: the judge recomputes a few calls of most samples, and
    chaining all of a sample's (up to ``MAX_CALLS``, three small operations a width each) cost it 0.48 s a sample
    on CPU for nothing (a review, session 35)."""

    def __init__(self, calls: list[tuple[int, Scale]], prints: torch.Tensor) -> None:
        self.calls, self.prints = calls, prints

    def __len__(self) -> int:
        return len(self.calls)

    def __getitem__(self, c):  # an int, or a slice (``Sequence``'s contract)
        if isinstance(c, slice):
            return [self[i] for i in range(len(self))[c]]
        c = range(len(self))[c]  # a negative index counts from the end; out of range raises IndexError
        index, scale = self.calls[c]
        return index, chained(scale, self.prints[c - 1].unbind() if c else None)


def check_lockstep(prints: torch.Tensor, expected: torch.Tensor) -> None:
    """A stateful candidate's per-call fingerprints (``[calls, 2]``) against the lockstep baseline's for the same
    calls: every row must match, since each call's result depends on every call before it."""
    check_record(prints, tuple(expected.shape))
    close = torch.isclose(prints.double(), expected.double().cpu(), rtol=FINGERPRINT_RTOL, atol=1e-6).all(dim=1)
    if not bool(close.all()):
        j = int((~close).nonzero()[0])
        raise AssertionError(
            f"call {j + 1} of {len(prints)} in a timed sample did not compute what it should during timing (L1 "
            f"norms of its output and gradients {prints[j].double().tolist()} against "
            f"{expected[j].double().tolist()} from the grader's step, which trains on the same inputs in the same "
            "order): a step that computes another loss or trains other weights differs here (the correctness "
            "checks say where), and so does code that skips or changes steps while it is timed"
        )


def _time_remote(learner, handle: str, sample: Sample, threads: int | None = None) -> tuple[float, Answer]:
    """One candidate sample on the judge's clock; with ``threads``, the CPU time the learner's processes used in it
    must fit on that many cores (``check_cores``)."""
    args = {"handle": handle, "schedule": [list(s) for s in sample.calls], "seed": sample.seed, "chain": sample.chain}
    return time_once(learner, "timing.run", args, what="the timed calls", cores=threads)


def check_work(done: int, calls: int, per_call: int, what: str) -> None:
    """A sample of ``calls`` timed calls ran ``done`` units of work in compiled graphs, where each call runs
    ``per_call`` (red team, session 37: a function compiled for the calls before timing and eager while timed
    kept the right values, and exercise 3's step, with AdamW fused, passed at 1.10x against 1.05x)."""
    if done < per_call * calls:
        raise AssertionError(
            f"during a timed sample of {calls} calls your compiled graphs ran {done} {what}, where each call runs "
            f"{per_call} ({per_call * calls} in all): part of the timed work ran eagerly, outside the graphs compiled "
            "before timing. Compile once and call the compiled function on every call"
        )


def check_cores(used_ns: int, seconds: float, threads: int) -> None:
    """The learner's processes ran on the check's ``threads`` cores, which the judge pinned them to, as it times its
    baseline on as many: more CPU time than those cores give in ``seconds`` means work handed to threads or
    processes that widened their own CPU mask (red team, session 33: a helper process on the second core ran half
    the timed calls, and exercise 2's slow scorer scored 1.46x against 1.25x)."""
    allowed = threads * seconds * CORE_SLACK + CORE_SLACK_S
    if used_ns / 1e9 > allowed:
        raise AssertionError(
            f"during a timed sample your code used {used_ns / 1e9:.3f} s of CPU time in {seconds:.3f} s, "
            f"{used_ns / 1e9 / seconds:.1f} cores' worth, where the check runs it on {threads}: work handed to threads "
            "or processes on cores of their own is not compared fairly with the grader's baseline. Leave the CPU "
            "mask the grader sets, and time on the threads it gives you"
        )


def compare(
    learner,
    handle: str,
    baseline: Callable[..., Any],
    make_args: Callable[[int], tuple],
    *,
    grads: tuple[bool, ...],
    device: str,
    trials: int,
    warmup: int,
    min_sample_s: float,
    threads: int,
    rng: random.Random,
    verify: Callable[[torch.Tensor, tuple], None] | None = None,
    sets: int = 8,
    required: float | None = None,
    spot_checks: int = SPOT_CHECKS,
    params: tuple = (),
    lockstep: bool = False,
    work: tuple[int, str] | None = None,
) -> Comparison:
    """Interleave ``baseline`` (here) and the learner's staged ``handle`` (in the worker); see the module
    docstring. ``make_args(i)`` gives input set ``i`` (CPU tensors); ``grads`` marks inputs that need grad;
    ``verify(output, args)`` checks the candidate's last output of each trial against the judge's reference
    for the same (transformed) args, and ``spot_checks`` calls of each sample, picked after its answer, must
    leave the fingerprints the baseline leaves for the same input. ``params``, the baseline's tensors whose
    gradients each call computes (its model's parameters), join its fingerprints, as the candidate's staged
    ``params`` join its own: then a call that skips its backward shows. With ``lockstep`` (a candidate that keeps
    state, a training step's weights), the baseline runs every schedule the candidate runs, in the same order,
    with as many calls a sample, and every call's fingerprint must match the baseline's (``spot_checks`` is
    unused): each step's loss depends on every step before it, so a skipped or changed step shows from the next
    call on. With ``required``, trials are added (up to four times ``trials``, one at a time) while the median's
    95% confidence interval contains it. ``work``, ``(per call, what)``: every sample's calls must have run that
    much work in compiled graphs, as the staged function's ``grader.probing.compiled_work`` counts it (``what``
    names the unit: "linear layers")."""
    arg_sets = [tuple(make_args(i)) for i in range(sets)]
    arity = len(arg_sets[0])
    learner.ask(
        "timing.stage",
        {"handle": handle, "sets": sets, "arity": arity, "grads": list(grads)},
        {f"{i}.{j}": t for i, args in enumerate(arg_sets) for j, t in enumerate(args)},
        what="staging inputs",
    )
    local = [tuple(t.to(device) for t in args) for args in arg_sets]
    warm_chain(local)

    def schedule(n: int) -> Sample:  # a seed a JSON reply may hold (grader.protocol.MAX_INT_DIGITS)
        # a stateful candidate's calls depend on each other already, and the lockstep check compares every one of
        # them with the baseline's own: chained factors would carry each side's rounding into the next call
        return Sample([(rng.randrange(sets), 1.0) for _ in range(n)], rng.getrandbits(53), chain=not lockstep)

    coverage = Sample([(i, end) for i in range(sets) for end in REACH])  # every set at both ends, untimed

    picker = random.Random(rng.random())  # which calls are recomputed: drawn after each answer
    # and samples recomputed whole: one forged fingerprint splits a chain in two, which could then run side by side
    # (a review, session 35), and a spot check finds it only where it picks that call
    whole = set(picker.sample(range(trials), min(WHOLE_SAMPLES, trials)))

    def want(entry: tuple[int, Scale]) -> torch.Tensor:
        return run_schedule(baseline, local, [entry], grads, params)[1][0]

    def check(answer: Answer, sample: Sample, local_prints: torch.Tensor | None, every: bool = False) -> None:
        calls = seeded(sample.calls, sample.seed, local)  # each call's factors, as both sides drew them
        if sample.chain:  # and each call's link to the one before it, from the fingerprint the worker reported
            calls = linked(calls, answer.tensor("prints"))
        if verify is not None:
            index, scale = calls[-1]
            verify(answer.tensor("out"), tuple(a.cpu() for a in transform(local[index], scale, (False,) * arity)))
        if lockstep:
            check_lockstep(answer.tensor("prints"), local_prints)
        else:
            picks = range(len(calls)) if every else picker.sample(range(len(calls)), min(spot_checks, len(calls)))
            check_fingerprints(answer.tensor("prints"), calls, want, picks)
        if work is not None:  # last: a call skipped or changed is the fingerprints' to report, with their message
            check_work(answer.value("work", int), len(sample.calls), *work)

    def prints_of(timed: tuple[float, Any]) -> torch.Tensor:
        return timed[1][1]  # (seconds, (last output, fingerprints))

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.compiler.reset()
    pinned = contextlib.ExitStack()
    try:
        answer = _time_remote(learner, handle, coverage)[1]  # compiles happen here, on both sides, untimed
        check(answer, coverage, prints_of(_time_local(baseline, local, coverage, grads, device, params)))
        cores = pinned.enter_context(same_cores(learner, threads))
        for _ in range(max(1, warmup)):
            _, answer = _time_remote(learner, handle, sched := schedule(1))
            mine = prints_of(_time_local(baseline, local, sched if lockstep else schedule(1), grads, device, params))
            check(answer, sched, mine)
        first = schedule(1)
        with learner.frozen():  # it sizes the baseline's samples: learner code that slowed it would shorten them
            wait_for_idle_gpu(device)
            once_b, (_, mine) = _time_local(baseline, local, first, grads, device, params)
        once_c, answer = _time_remote(learner, handle, sized := first if lockstep else schedule(1))
        check(answer, sized, mine)
        calls_b = max(1, min(MAX_CALLS, int(min_sample_s / max(once_b, 1e-7)) + 1))
        calls_c = max(1, min(MAX_CALLS, int(min_sample_s / max(once_c, 1e-7)) + 1))
        if lockstep:  # the same calls on both sides: as many as the slower side's sample needs
            calls_b = calls_c = max(calls_b, calls_c)
        times_b: list[float] = []
        times_c: list[float] = []
        frozen = 0
        trial = 0

        def undecided() -> bool:
            if trial < trials:
                return True
            if required is None or trial >= 4 * trials:
                return False
            low, high = median_interval([b / c for b, c in zip(times_b, times_c)])
            return low < required <= high

        while undecided():
            sched_b = schedule(calls_b)
            sched_c = sched_b if lockstep else schedule(calls_c)
            for side in (0, 1) if trial % 2 == 0 else (1, 0):
                if side == 0:
                    with learner.frozen() as frozen:
                        wait_for_idle_gpu(device)
                        seconds, (_, mine) = _time_local(baseline, local, sched_b, grads, device, params)
                    times_b.append(seconds / calls_b)
                else:
                    seconds, answer = _time_remote(learner, handle, sched_c, cores)
                    times_c.append(seconds / calls_c)
            check(answer, sched_c, mine, every=trial in whole)
            trial += 1
    finally:
        pinned.close()
        torch.set_num_threads(before)
    ratios = [b / c for b, c in zip(times_b, times_c)]
    med, q1, q3 = quartiles_of(ratios)
    low, high = median_interval(ratios)
    return Comparison(
        med,
        q1,
        q3,
        Timing(*quartiles_of(times_b), trial),
        Timing(*quartiles_of(times_c), trial),
        trial,
        frozen or 0,
        low,
        high,
    )


def compare_checked(
    learner,
    ctx,
    check_id: str,
    handle: str,
    baseline: Callable[..., Any],
    make_args: Callable[[int], tuple],
    *,
    grads: tuple[bool, ...],
    verify: Callable[[torch.Tensor, tuple], None] | None = None,
    spot_checks: int = SPOT_CHECKS,
    params: tuple = (),
    lockstep: bool = False,
    work: tuple[int, str] | None = None,
) -> tuple[Comparison, float]:
    """:func:`compare` as a speed check runs it: the profile's trials, warm-up (at least 2), sample length and
    threads, unpredictable schedules, and ``check_id``'s threshold; returns it with the result."""
    p = ctx.profile
    required = ctx.required_speedup(check_id)
    result = compare(
        learner,
        handle,
        baseline,
        make_args,
        grads=grads,
        device=ctx.device,
        trials=p.trials,
        warmup=max(2, p.warmup),
        min_sample_s=p.min_sample_s,
        threads=p.threads,
        rng=random.SystemRandom(),
        verify=verify,
        required=required,
        spot_checks=spot_checks,
        params=params,
        lockstep=lockstep,
        work=work,
    )
    return result, required


def time_once(
    learner,
    probe: str,
    args: dict,
    tensors: dict | None = None,
    what: str = "the timed call",
    *,
    cores: int | None,
) -> tuple[float, Answer]:
    """Seconds from sending one request to receiving its answer, on the judge's clock. Inside ``learner.quiet()``:
    nothing of the judge's own housekeeping runs inside the clock (``RemoteLearner._watch``). ``cores``: how many
    cores the judge pinned the learner to (what ``same_cores`` yields), whose CPU time its processes must fit in
    (``check_cores``); None only for a call outside ``same_cores``, whose time is not compared."""
    before = learner.cpu_ns() if cores else None
    with learner.quiet():
        start = time.perf_counter()
        answer = learner.ask(probe, args, tensors, what=what)
        seconds = time.perf_counter() - start
    after = learner.cpu_ns() if before is not None else None
    if after is not None:
        check_cores(after - before, seconds, cores)
    return seconds, answer


def time_baseline(fn: Callable[[], Any], learner, device: str) -> tuple[float, Any]:
    """Seconds ``fn()`` takes here, with every learner process stopped and (on CUDA) the GPU idle."""
    with learner.frozen():
        wait_for_idle_gpu(device)
        synchronize(device)
        start = time.perf_counter()
        out = fn()
        synchronize(device)
        return time.perf_counter() - start, out
