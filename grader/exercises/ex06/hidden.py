"""Exercise 6, hidden checks (instructor only): another arrangement of blocks, other schedules, and the measured
compile-time ratio (on the lesson's ViT)."""

from __future__ import annotations

import random
import statistics

import torch

from coursekit.lessons.compile_time.givens import DEPTH, loss_fn, make_batch, make_model
from grader.exercises.ex06.probes import REGIONAL_HINT, grad_sums
from grader.exercises.ex06.public import (
    LINEARS_PER_BLOCK,
    expect_every_block_compiled,
    expect_no_recompile,
    expect_one_graph_per_kind,
    expect_regional_values,
    expect_same_training,
)
from grader.judging import assert_close
from grader.numbers import distinct
from grader.probing import graph_runs
from grader.registry import Measured, Shortfall, check
from grader.speed import same_cores, time_baseline, time_once

# attention blocks in two stages around a mixer stage, wider: one kind of block in two containers
OTHER_MODEL = {"model": "hybrid", "stages": [["attention", 2], ["mixer", 2], ["attention", 2]], "dim": 48, "heads": 3}
TIMING_TRIALS = 3


@check("ex06.regional.other_model", kind="correctness", points=1, needs=("compile_blocks",))
def regional_other_model(learner, ctx) -> None:
    """compile_blocks works on another arrangement and width of the two kinds of block: same values, one
    shared graph per kind."""
    seed = ctx.seed("ex06.other model") % 1000
    expect_regional_values(learner, ctx, seed, OTHER_MODEL)
    expect_one_graph_per_kind(learner, ctx, seed + 1, OTHER_MODEL)


def other_schedules(ctx) -> list[tuple[str, float, int]]:
    """Two schedules and learning rates the notebook never uses, drawn with the secret seed."""
    rng = random.Random(ctx.seed("ex06.other schedules"))
    return [
        (name, rng.choice((3e-4, 2e-3, 5e-3)), 6) for name in rng.sample(["CosineAnnealingLR", "LinearLR", "StepLR"], 2)
    ]


@check("ex06.step.other_schedules", kind="correctness", points=2, needs=("make_optimizer", "make_train_step"))
def step_other_schedules(learner, ctx) -> None:
    """Other schedulers and learning rates: the compiled loop follows the eager one and never recompiles."""
    for i, (name, lr, steps) in enumerate(other_schedules(ctx)):
        what = f"{name} from lr {lr:g}"
        expect_same_training(learner, ctx, 10 + i, lr, name, steps, what)
        expect_no_recompile(learner, ctx, 20 + i, lr, name, steps, what)


def whole_model_capture(ctx, seed: int):
    """The grader's baseline: the whole model compiled (``aot_eager``, counted) from a fresh compile state, then one
    forward and backward; the loss and each parameter's summed gradient, as the learner's capture reports them."""

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        torch.compiler.reset()
        model = make_model(seed, ctx.device)
        images, labels = make_batch(seed, ctx.device)
        compiled = torch.compile(model, backend=graph_runs("aot_eager"))
        loss = loss_fn()(compiled(images), labels)
        loss.backward()
        return loss.detach(), grad_sums(model)

    return run


@check("ex06.regional.compile_time", kind="speed", points=2, needs=("compile_blocks",), fresh=True)
def regional_compile_time(learner, ctx) -> Measured:
    """Regional compilation captures a cold first step several times faster than compiling the whole model."""
    with same_cores(learner, ctx.profile.threads) as cores:  # both sides on the same cores
        time_baseline(whole_model_capture(ctx, 0), learner, ctx.device)  # the first capture pays for imports
        time_once(learner, "ex06.cold_capture", {"seed": 0}, cores=cores)
        whole_s, regional_s = [], []
        for trial in range(TIMING_TRIALS):
            seconds, want = time_baseline(whole_model_capture(ctx, trial), learner, ctx.device)
            whole_s.append(seconds)
            seconds, got = time_once(learner, "ex06.cold_capture", {"seed": trial}, cores=cores)
            if got.value("frames", int) == 0:
                raise AssertionError("compile_blocks compiled nothing with the backend it was given. " + REGIONAL_HINT)
            sizes = got.ints("linears")
            if max(sizes, default=0) < LINEARS_PER_BLOCK:  # a token compile while the blocks run eagerly
                raise AssertionError(
                    f"the timed capture compiled no whole block: its graphs hold {sizes} linear layers, a block "
                    f"{LINEARS_PER_BLOCK}, so its time is not a regional compile's. " + REGIONAL_HINT
                )
            expect_every_block_compiled(got, DEPTH, "the timed capture", steps=1)
            want_loss, want_grads = want
            assert_close(
                got.tensor("loss"),
                want_loss,
                torch.float32,
                "the loss of the first step after compile_blocks",
                REGIONAL_HINT,
            )
            assert_close(  # a capture that skips the backward, or some block's, is not a first training step
                got.tensor("grad_sums", shape=tuple(want_grads.shape)),
                want_grads,
                torch.float32,
                "each parameter's summed gradient after the first step (nan: a parameter got none)",
                REGIONAL_HINT,
            )
            regional_s.append(seconds)
    ratio = statistics.median(whole_s) / statistics.median(regional_s)
    required = ctx.required_speedup("ex06.regional.compile_time")
    shown, needed = distinct(ratio, required)  # never printed equal to the threshold it misses
    detail = (
        f"cold capture (Dynamo + AOTAutograd, backend aot_eager) of a {DEPTH}-block ViT: whole model "
        f"{statistics.median(whole_s):.2f} s, compile_blocks {statistics.median(regional_s):.2f} s "
        f"(medians of {TIMING_TRIALS}), {shown}"
    )
    if ratio < required:
        raise Shortfall(
            f"regional compilation should cut the cold compile: {detail}; required {needed}. " + REGIONAL_HINT,
            measured=ratio,
            required=required,
        )
    return Measured(ratio, required, detail)
