"""Exercise 2, hidden checks (instructor only): gradients on a secret batch, the statistic buffer, one compile,
no syncs, speed."""

from __future__ import annotations

import random

import torch

from coursekit.lessons.graph_breaks.givens import sample_rows
from grader.exercises.ex02.public import (
    IN_FEATURES,
    RESULT_HINT,
    Case,
    broken,
    compiled_beside_eager,
    expect_cases,
    public_cases,
    weights,
)
from grader.judging import assert_close, assert_consistent, expect_linears, linear_layers
from grader.numbers import distinct
from grader.registry import Measured, Shortfall, check
from grader.speed import compare_checked


def hidden_cases(ctx) -> list[Case]:
    """Batches the learner never sees."""
    rng = random.Random(ctx.seed("ex02.hidden cases"))
    return [
        Case(
            "secret seed",
            rng.randint(2, 400),
            seed=ctx.seed("ex02.hidden case inputs"),
            scale=rng.choice([0.5, 1.0, 25.0]),
            padding=rng.choice([0.0, 0.3]),
        )
    ]


@check("ex02.scorer.gradients", kind="correctness", points=2, needs=("FixedScorer", "calibrate"))
def scorer_gradients(learner, ctx) -> None:
    """Outputs, input gradients and parameter gradients match on all batches, a secret one included."""
    expect_cases(learner, public_cases(ctx) + hidden_cases(ctx), grads=True)


@check("ex02.scorer.statistic", kind="correctness", points=1, needs=("FixedScorer", "calibrate"))
def scorer_statistic(learner, ctx) -> None:
    """FixedScorer keeps the mean activation as a tensor buffer `mean_activation`, updated by forward."""
    model = broken()
    cases = public_cases(ctx)[1:3]
    xs = [c.rows_on() for c in cases]
    got = learner.ask(
        "ex02.statistic", {"batches": len(xs)}, {**weights(model), **{f"x{i}": x for i, x in enumerate(xs)}}
    )
    stats = got.tensor("stats", shape=(len(xs),))
    for i, (case, x) in enumerate(zip(cases, xs)):
        model(x)
        assert_close(
            stats[i],
            torch.tensor(model.stats["mean_activation"]),
            torch.float32,
            f"mean_activation after case '{case.name}'",
            "Update it in forward with self.mean_activation.copy_(h.mean()) under torch.no_grad().",
        )


@check("ex02.scorer.compiles_once", kind="structure", points=2, needs=("FixedScorer", "calibrate"))
def scorer_compiles_once(learner, ctx) -> Measured:
    """torch.compile(fullgraph=True) compiles FixedScorer exactly once for three batches of one shape (other values),
    forward and backward."""
    model = broken()
    rows = public_cases(ctx)[4].rows
    xs = [sample_rows(rows, IN_FEATURES, 50 + seed) for seed in range(3)]
    batches = {**weights(model), **{f"x{i}": x for i, x in enumerate(xs)}}
    got = compiled_beside_eager(learner, "ex02.compiles", batches, len(xs))
    frames = got.value("frames", int)
    if frames != 1:
        raise Shortfall(
            f"three batches of the same shape compiled {frames} times; expected once (TORCH_LOGS=recompiles says why)",
            measured=frames,
            required=1,
        )
    return Measured(1, 1, "compiled once with fullgraph=True")


@check("ex02.scorer.no_sync", kind="structure", points=1, needs=("FixedScorer", "calibrate"))
def scorer_no_sync(learner, ctx) -> Measured:
    """FixedScorer's forward reads nothing back to the host outside the calibrate op."""
    model = broken()
    case = public_cases(ctx)[4]
    first, x = case.rows_on(), Case("rescaling", case.rows, seed=6, scale=40.0, padding=0.5).rows_on()
    got = learner.ask("ex02.traffic", {}, {**weights(model), "x0": first, "x1": x})
    own = learner.ask("ex02.scorer", {"batches": 1, "grads": False, "twin": True}, {**weights(model), "x0": x})
    assert_consistent(got.tensor("out1"), own.tensor("out0"), "FixedScorer's output while its traffic was watched")
    events = sum(got.counts("syncs").values()) + sum(got.counts("host_tensors").values())
    if events:
        raise Shortfall(
            f"FixedScorer.forward moves data between host and device outside calibrate: "
            f"{got.text('summary')}. No .item(), no boolean-mask indexing, no tensors from Python data.",
            measured=events,
            required=0,
        )
    return Measured(0, 0, "no syncs outside calibrate")


@check("ex02.scorer.speed", kind="speed", points=2, needs=("FixedScorer", "calibrate"))
def scorer_speed(learner, ctx) -> Measured:
    """Compiled FixedScorer (forward + backward) beats the grader's compiled BrokenScorer by the device's threshold."""
    p = ctx.profile
    model = broken()
    staged = learner.ask(
        "ex02.timed_scorer", {"handle": "scorer"}, weights(model) | {"x": sample_rows(p.batch_size, IN_FEATURES, 5)}
    )
    expect_linears(
        staged.value("linears", int),
        (model,),
        "the graphs of torch.compile(FixedScorer)",
        "Nothing compiled is left to time (torch.compiler.disable, or code Dynamo skips): make forward one graph "
        "Dynamo can capture.",
        gate=True,
    )
    reference = broken().to(ctx.device)
    compiled_broken = torch.compile(broken().to(ctx.device))

    def baseline(x: torch.Tensor) -> torch.Tensor:
        out = compiled_broken(x)
        out.square().sum().backward()
        return out

    def make_args(i: int) -> tuple[torch.Tensor]:
        return (sample_rows(p.batch_size, IN_FEATURES, ctx.seed("ex02.speed inputs", i)),)

    def verify(out: torch.Tensor, args: tuple) -> None:
        with torch.no_grad():
            assert_close(
                out,
                reference(args[0].to(ctx.device)),
                torch.float32,
                "FixedScorer output during timing",
                f"{RESULT_HINT} Every output goes through calibrate: if ex02.calibrate.opcheck fails, fix that first.",
            )

    result, required = compare_checked(
        learner,
        ctx,
        "ex02.scorer.speed",
        "scorer",
        baseline,
        make_args,
        grads=(False,),
        verify=verify,
        params=tuple(compiled_broken.parameters()),
        work=(linear_layers(model), "linear layers"),
    )
    shown, needed = distinct(result.speedup, required)  # never printed equal to the threshold it misses
    detail = (
        f"{shown} the grader's compiled BrokenScorer (median of {result.trials} interleaved "
        f"trials, 95% CI {result.low:.2f}-{result.high:.2f})"
    )
    if result.speedup < required:
        raise Shortfall(
            f"compiled FixedScorer is too slow: {detail}; required {needed}. Remaining breaks "
            "or host syncs are the usual cause.",
            measured=result.speedup,
            required=required,
        )
    return Measured(result.speedup, required, detail)
