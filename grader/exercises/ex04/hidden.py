"""Exercise 4, hidden checks (instructor only): a secret length stream, compile counts, no recompiles, speed."""

from __future__ import annotations

import random
import statistics
from functools import partial

import torch

from coursekit.lessons.dynamic_shapes.givens import (
    MAX_COMPILES,
    STREAM_BACKEND,
    STREAM_BATCHES,
    STREAM_ROWS,
    batch_of,
    length_stream,
)
from coursekit.lessons.dynamic_shapes.rehearse import static_stream
from grader.exercises.ex04.public import (
    MASK_HINT,
    ask_batches,
    batches_payload,
    buckets,
    expect_outputs,
    naive,
    per_sequence,
    weights,
)
from grader.judging import assert_answers_consistent, assert_close, linear_layers
from grader.numbers import distinct
from grader.registry import Measured, Shortfall, check
from grader.speed import same_cores, time_baseline, time_once

STREAM_TRIALS = 5
STREAM_CHECKED = 3  # batches of each timed stream whose outputs the judge checks, picked after the answer
NEEDS = ("MaskedTagger", "collate", "bucket_length", "compile_tagger")


def hidden_stream(ctx, trial: int | None = None) -> dict[str, list[torch.Tensor]]:
    """The secret stream of batches; each timed trial gets its own (``trial``), so no trial can answer from
    outputs remembered from another."""
    rows = STREAM_ROWS
    seed = ctx.seed("ex04.stream", 0 if trial is None else trial + 1)
    lengths = length_stream(STREAM_BATCHES, seed)
    return {f"stream{i:02d}": batch_of(n, rows, seed + i) for i, n in enumerate(lengths)}


@check("ex04.stream.outputs", kind="correctness", points=2, needs=NEEDS)
def stream_outputs(learner, ctx) -> None:
    """The compiled pipeline matches the eager unpadded reference on every batch of a hidden length stream."""
    model = naive()
    stream = dict(list(hidden_stream(ctx).items())[:8])
    got = ask_batches(learner, "ex04.outputs", stream, model, compiled=True)
    expect_outputs(got, model, stream, "compiled MaskedTagger")


def _all_compiled(got, what: str, *, gate: bool = False) -> None:
    """Every batch of ``what`` called a compiled graph that holds the tagger (its three linear layers) on that
    batch's own tokens or mask (red team, session 19: a tagger left eager, or compiled for its first batch only, had
    passed the compile counts; session 35: so had the batch run eagerly beside a compiled call on a dummy input;
    session 37: so had the tagger compiled once on a 1x4 copy, then run eagerly beside a tiny compiled graph on each
    batch's own mask). ``gate``: the speed check's precondition, failed without a measurement (a batch count is not
    a speedup)."""
    linears, eager = got.value("linears", int), got.value("eager", int)
    want = linear_layers(naive())
    if linears < want or eager:
        message = (
            f"{what}: {eager} of {STREAM_BATCHES} batches got no output from a compiled graph holding the tagger's "
            f"{want} linear layers, run on their own tokens and mask (the graphs compile_tagger's backend received "
            f"hold {linears} linear layers in all). The counts mean nothing unless every batch runs through the "
            "compiled tagger: a compiled call on a copy, a slice or a stand-in input beside the model run eagerly "
            "does not count, and a batch's output must be the compiled graph's own (not post-processed outside "
            "it, not computed from anything but the batch and the tagger's own weights, which must stay as they "
            "are). Return torch.compile(model, backend=backend, ...) and call it on every batch's tokens and mask."
        )
        if gate:
            raise AssertionError(message)
        raise Shortfall(message, measured=STREAM_BATCHES - eager, required=STREAM_BATCHES)


def _counted(learner, ctx, warm: bool) -> tuple[int, str | None]:
    model = naive()
    stream = hidden_stream(ctx)
    batches = dict(stream)
    if warm:
        batches |= {f"warm{b}": batch_of(b, STREAM_ROWS, b) for b in sorted(set(buckets(learner)))}
    got = ask_batches(learner, "ex04.counted", batches, model, stance=warm, tagger_linears=linear_layers(model))
    recompiled = got.text("recompiled", optional=True, limit=400)
    if recompiled is None:
        own = ask_batches(learner, "ex04.outputs", stream, model, compiled=True)
        outputs = {f"{name}.out": f"the counted stream's output on {name}" for name in stream}
        assert_answers_consistent(got, own, outputs, rtol=1e-4, atol=1e-6)
    if recompiled is None and (warm or got.value("frames", int) <= MAX_COMPILES):  # the cliff has its own message
        _all_compiled(got, "the hidden stream")
    return got.value("frames", int), recompiled


@check("ex04.stream.compile_bound", kind="structure", points=2, needs=NEEDS)
def stream_compile_bound(learner, ctx) -> Measured:
    """A hidden stream of random lengths compiles at most MAX_COMPILES times (and never hits the recompile limit)."""
    frames, _ = _counted(learner, ctx, warm=False)
    if frames > MAX_COMPILES:
        limit = torch._dynamo.config.recompile_limit
        cliff = (
            f" It reached recompile_limit={limit}: from then on Dynamo ran your model eagerly, after one warning."
            if frames >= limit
            else ""
        )
        raise Shortfall(
            f"{STREAM_BATCHES} batches compiled {frames} times; at most {MAX_COMPILES} allowed.{cliff} "
            "With dynamic=False each new padded length is one more compile (with the default, the first change "
            "recompiles and the length then turns symbolic), and an int the model changes on every call (a call "
            "counter?) recompiles every call: TORCH_LOGS=recompiles names the failing guard.",
            measured=frames,
            required=MAX_COMPILES,
        )
    return Measured(frames, MAX_COMPILES, f"{frames} compiles for {STREAM_BATCHES} batches")


@check("ex04.stream.no_recompile_after_warmup", kind="structure", points=2, needs=NEEDS)
def stream_no_recompile(learner, ctx) -> Measured:
    """After one batch per bucket, torch.compiler.set_stance('fail_on_recompile') holds over a hidden stream."""
    _, recompiled = _counted(learner, ctx, warm=True)
    if recompiled:
        raise Shortfall(
            f"a batch recompiled after every bucket had been seen once: {recompiled}. A Python "
            "number that changes per call (a counter attribute?) or a length outside your buckets does this.",
            measured=1,
            required=0,
        )
    return Measured(0, 0, "no recompiles after warm-up")


@check("ex04.stream.speed", kind="speed", points=2, needs=NEEDS)
def stream_speed(learner, ctx) -> Measured:
    """A cold hidden stream (compiles included) runs faster than the grader's statically compiled NaiveTagger.

    Each trial starts both sides from a fresh compile state and compiles with the ``aot_eager`` backend: what a
    recompile costs is Dynamo's capture and AOTAutograd's trace, paid once per new shape, and without Inductor's
    code generation (and its disk caches) that cost is measured in seconds and repeatably. The trials alternate
    which side goes first; the grade is the median of their ratios."""
    model = naive()
    device_model = naive().to(ctx.device)
    tagger_linears = linear_layers(model)  # feed-forward and head: 3

    def baseline(stream: dict[str, list[torch.Tensor]]) -> None:
        static_stream(device_model, list(stream.values()), ctx.device)

    picker = random.Random(ctx.seed("ex04.checked batches"))  # which batches are checked: drawn after each answer
    ratios, baseline_times, candidate_times = [], [], []
    with same_cores(learner, ctx.profile.threads) as cores:  # both sides on the same cores
        for trial in range(STREAM_TRIALS):
            stream = hidden_stream(ctx, trial)
            for side in (0, 1) if trial % 2 == 0 else (1, 0):
                if side == 0:
                    baseline_times.append(time_baseline(partial(baseline, stream), learner, ctx.device)[0])
                else:
                    # the batches travel in the timed request: staged by an earlier one, they would reach learner
                    # code before the clock starts (a rewritten staging probe could compute the stream there)
                    payload, tensors = batches_payload(stream)
                    args = {**payload, "backend": STREAM_BACKEND, "tagger_linears": tagger_linears}
                    tensors = {**tensors, **weights(model)}
                    seconds, got = time_once(learner, "ex04.cold_stream", args, tensors, cores=cores)
                    candidate_times.append(seconds)
                    if got.value("linears", int) < tagger_linears:  # eager, or a token compile beside it
                        raise AssertionError(
                            "the timed stream compiled no whole tagger: the graphs compile_tagger's backend "
                            f"received hold {got.value('linears', int)} linear layers, the tagger {tagger_linears}, "
                            "so its time is not a compiled stream's. Return torch.compile(model, backend=backend, "
                            "...)."
                        )
                    if got.value("eager", int):  # compiled for some batches only, or beside eager batches
                        _all_compiled(got, "the timed stream", gate=True)
                    for name in picker.sample(list(stream), STREAM_CHECKED):
                        assert_close(
                            got.tensor(f"{name}.out"),
                            per_sequence(model, stream[name]),
                            torch.float32,
                            f"output of stream batch {name} during timing",
                            MASK_HINT,
                        )
            ratios.append(baseline_times[-1] / candidate_times[-1])
    torch.compiler.reset()
    speedup = statistics.median(ratios)
    required = ctx.required_speedup("ex04.stream.speed")
    shown, needed = distinct(speedup, required)  # never printed equal to the threshold it misses
    detail = (
        f"{shown} the grader's statically compiled NaiveTagger over {len(stream)} cold batches "
        f"(median of {STREAM_TRIALS} trials; {statistics.median(baseline_times):.2f} s vs "
        f"{statistics.median(candidate_times):.2f} s, compiles included)"
    )
    if speedup < required:
        raise Shortfall(
            f"the stream is too slow: {detail}; required {needed}. Count your compiles.",
            measured=speedup,
            required=required,
        )
    return Measured(speedup, required, detail)
