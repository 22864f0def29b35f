"""Exercise 4, hidden checks: a secret length stream, compile counts, no recompiles, speed."""

from __future__ import annotations

import time

import torch

from coursekit.ex04 import MAX_COMPILES, batch_of, length_stream
from coursekit.timing import synchronize
from grader.checks.common import assert_close
from grader.checks.ex04_public import MASK_HINT, _buckets, _models, _run
from grader.reference.ex04 import per_sequence
from grader.registry import Measured, Shortfall, check, in_report_order

STREAM_BATCHES = 16


def _hidden_stream(ctx) -> list[list[torch.Tensor]]:
    rows = ctx.profile.batch_size
    return [batch_of(n, rows, ctx.secret_seed + i) for i, n in enumerate(length_stream(STREAM_BATCHES, ctx.secret_seed))]


@check("ex04.stream.outputs", kind="correctness", points=2,
       needs=("MaskedTagger", "collate", "bucket_length", "compile_tagger"))
def stream_outputs(sub, ctx) -> None:
    """The compiled pipeline matches the eager unpadded reference on every batch of a hidden length stream."""
    model, naive = _models(sub, ctx)
    torch.compiler.reset()
    compiled = sub.get("compile_tagger")(model)
    for i, batch in enumerate(_hidden_stream(ctx)[:8]):
        with torch.no_grad():
            got = _run(compiled, sub.get("collate"), batch, ctx.device)
        assert_close(got, per_sequence(naive, [s.to(ctx.device) for s in batch]), torch.float32,
                     f"compiled MaskedTagger on hidden batch {i} (length {len(batch[0])})", MASK_HINT)


def _counted_stream(sub, ctx, warm: bool):
    from torch._dynamo.testing import CompileCounterWithBackend

    model, _ = _models(sub, ctx)
    torch.compiler.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = sub.get("compile_tagger")(model, backend=counter)
    collate = sub.get("collate")
    if warm:
        for b in _buckets(sub):
            with torch.no_grad():
                _run(compiled, collate, batch_of(b, ctx.profile.batch_size, b), ctx.device)
    return compiled, collate, counter


@check("ex04.stream.compile_bound", kind="structure", points=2,
       needs=("MaskedTagger", "collate", "bucket_length", "compile_tagger"))
def stream_compile_bound(sub, ctx) -> Measured:
    """A hidden stream of random lengths compiles at most MAX_COMPILES times (and never hits the recompile limit)."""
    compiled, collate, counter = _counted_stream(sub, ctx, warm=False)
    for batch in _hidden_stream(ctx):
        with torch.no_grad():
            _run(compiled, collate, batch, ctx.device)
    frames = counter.frame_count
    if frames > MAX_COMPILES:
        limit = torch._dynamo.config.recompile_limit
        cliff = (f" It reached recompile_limit={limit}: from then on Dynamo ran your model eagerly, silently."
                 if frames >= limit else "")
        raise Shortfall(f"{STREAM_BATCHES} batches compiled {frames} times; at most {MAX_COMPILES} allowed.{cliff} "
                        "Each new padded length, and each new value of a Python number the model reads "
                        "(a call counter?), is a recompile: TORCH_LOGS=recompiles names the failing guard.",
                        measured=frames, required=MAX_COMPILES)
    return Measured(frames, MAX_COMPILES, f"{frames} compiles for {STREAM_BATCHES} batches")


@check("ex04.stream.no_recompile_after_warmup", kind="structure", points=2,
       needs=("MaskedTagger", "collate", "bucket_length", "compile_tagger"))
def stream_no_recompile(sub, ctx) -> Measured:
    """After one batch per bucket, torch.compiler.set_stance('fail_on_recompile') holds over a hidden stream."""
    compiled, collate, _ = _counted_stream(sub, ctx, warm=True)
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            for batch in _hidden_stream(ctx):
                with torch.no_grad():
                    _run(compiled, collate, batch, ctx.device)
    except Exception as exc:  # noqa: BLE001 - the stance raises a dynamo error naming the guard
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Shortfall(f"a batch recompiled after every bucket had been seen once: {first[:300]}. A Python "
                        "number that changes per call (a counter attribute?) or an unbucketed length does this.",
                        measured=1, required=0) from None
    return Measured(0, 0, "no recompiles after warm-up")


@check("ex04.stream.speed", kind="speed", points=2,
       needs=("MaskedTagger", "collate", "bucket_length", "compile_tagger"))
def stream_speed(sub, ctx) -> Measured:
    """A cold hidden stream (compiles included) runs faster than the grader's statically compiled NaiveTagger."""
    model, naive = _models(sub, ctx)
    collate, compile_tagger = sub.get("collate"), sub.get("compile_tagger")
    stream = _hidden_stream(ctx)

    def run_stream(fn) -> tuple[float, list[torch.Tensor]]:
        torch.compiler.reset()
        outs = []
        synchronize(ctx.device)
        start = time.perf_counter()
        with torch.no_grad():
            for batch in stream:
                outs.append(fn(batch))
        synchronize(ctx.device)
        return time.perf_counter() - start, outs

    baseline_fn = torch.compile(naive, dynamic=False)
    baseline_s, _ = run_stream(lambda b: baseline_fn(torch.stack(b).to(ctx.device)))
    candidate_fn = compile_tagger(model)
    candidate_s, outs = run_stream(lambda b: _run(candidate_fn, collate, b, ctx.device))
    for i in (0, len(stream) // 2, len(stream) - 1):
        assert_close(outs[i], per_sequence(naive, [s.to(ctx.device) for s in stream[i]]), torch.float32,
                     f"output of stream batch {i} during timing", MASK_HINT)
    speedup = baseline_s / candidate_s
    required = ctx.required_speedup("ex04.stream.speed")
    detail = (f"{speedup:.2f}x the grader's statically compiled NaiveTagger over {len(stream)} cold batches "
              f"({baseline_s:.1f} s vs {candidate_s:.1f} s, compiles included)")
    if speedup < required:
        raise Shortfall(f"the stream is too slow: {detail}; required {required:.2f}x. Count your compiles.",
                        measured=speedup, required=required)
    return Measured(speedup, required, detail, timed_s=baseline_s + candidate_s)


# Report rows follow the notebook: public checks first, as the tasks come.
ORDER = ("ex04.collate.layout", "ex04.tagger.outputs", "ex04.stream.outputs", "ex04.stream.compile_bound",
         "ex04.stream.no_recompile_after_warmup", "ex04.stream.speed")


in_report_order(ORDER)
