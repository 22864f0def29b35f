"""Exercise 1, hidden checks (instructor only): hidden cases, host/device traffic, one graph, speed, train step."""

from __future__ import annotations

import random

import torch
from torch import nn

from coursekit.lessons.cross_entropy.givens import IGNORE_INDEX, NaiveSmoothedCE, sample_inputs
from coursekit.models import ToyConvNet
from coursekit.traffic import sync_waits
from grader.exercises.ex01.probes import costs_input, hidden_costs
from grader.exercises.ex01.public import (
    PROFILE_HINT,
    PUBLIC_CASES,
    VALUE_HINT,
    Case,
    Expected,
    expect_op_counts,
    expect_values,
    loss_args,
    stored,
)
from grader.exercises.ex01.reference import accumulated_step, profiled_op_counts, smoothed_ce
from grader.judging import assert_close, assert_consistent, assert_parameters_close
from grader.numbers import distinct
from grader.registry import Measured, Shortfall, check
from grader.speed import compare_checked

TRAFFIC_HINT = (
    "Build tensors from Python data once, in __init__ (register_buffer), not per call (aten::lift_fresh); "
    "never read tensor values on the host inside the loss: no .item(), .tolist(), assert or if on a tensor, "
    "no boolean-mask indexing like x[mask] (aten::nonzero); mask with torch.where or multiplication and index "
    "rows with gather or torch.arange. Note: F.cross_entropy with class weights AND label smoothing reads a "
    "count on the host internally, so this rung must be written by hand."
)


def live(case: Case) -> Expected:
    """A case with the expected values computed now by the reference."""
    logits, target, weights = case.inputs()
    loss, grad = smoothed_ce(logits, target, weights, case.smoothing, case.ignore_index)
    return Expected(case, logits, target, weights, loss, grad)


def hidden_cases(ctx) -> list[Case]:
    """Cases the learner never sees: a secret seed, large logits, float64, the profile's size."""
    rng = random.Random(ctx.seed("ex01.hidden cases"))
    p = ctx.profile
    return [
        Case(
            "secret seed",
            rng.randint(2, 300),
            rng.randint(2, 64),
            seed=ctx.seed("ex01.hidden case inputs"),
            smoothing=rng.choice([0.0, 0.05, 0.1, 0.2]),
            ignore_index=rng.choice([IGNORE_INDEX, 0]),
        ),
        Case("large logits", 128, 10, seed=5, scale=60.0),
        Case("float64", 100, 20, seed=6, smoothing=0.2, dtype=torch.float64),
        Case("profile size", p.loss_batch, p.loss_classes, seed=4),
    ]


@check("ex01.profile.hidden", kind="correctness", points=1, needs=("op_counts",))
def profile_hidden(learner, ctx) -> None:
    """op_counts on other sizes, drawn with the secret seed: the operators the costs run, and every other ATen
    operator the grader's own profile of the same call counts (which no formula over the sizes gives)."""
    rng = random.Random(ctx.seed("ex01.op count sizes"))
    for i in range(2):
        reads, columns, seed = rng.randint(4, 9), rng.randint(6, 12), ctx.seed("ex01.op count inputs", i)
        counts = expect_op_counts(learner, reads=reads, columns=columns, seed=seed)
        want = profiled_op_counts(hidden_costs(), (costs_input(reads, columns, seed), reads, columns))
        wrong = sorted(op for op in want.keys() | counts.keys() if counts.get(op, 0) != want.get(op, 0))
        if wrong:
            op = wrong[0]
            raise AssertionError(
                f"op_counts with {reads} reads and {columns} columns: {op} counted {counts.get(op, 0)} times, the "
                f"profiler counts {want.get(op, 0)} ({len(wrong)} operator(s) differ). Count what the profiler "
                "records in one call, not what you expect the code to run. " + PROFILE_HINT
            )


@check("ex01.smoothed_ce.gradients", kind="correctness", points=2, needs=("SmoothedCE",))
def smoothed_ce_gradients(learner, ctx) -> None:
    """SmoothedCE's values and gradients match on all cases, hidden ones included (secret seed, large logits,
    float64, the profile's size)."""
    cases = [stored(c) for c in PUBLIC_CASES] + [live(c) for c in hidden_cases(ctx)]
    expect_values(learner, "SmoothedCE", cases, grads=True, label="SmoothedCE")


def _profile_case(ctx) -> Expected:
    return live(
        Case(
            "profile size", ctx.profile.loss_batch, ctx.profile.loss_classes, seed=ctx.seed("ex01.profile case") % 1000
        )
    )


@check("ex01.smoothed_ce.no_host_traffic", kind="structure", points=2, needs=("SmoothedCE",))
def smoothed_ce_no_host_traffic(learner, ctx) -> Measured:
    """SmoothedCE's forward and backward make no host-built tensors and no device-to-host syncs."""
    exp = _profile_case(ctx)
    inputs = {"logits": exp.logits, "target": exp.target}
    seen = learner.ask("ex01.traffic", loss_args("SmoothedCE", exp, grads=True), inputs)
    own = learner.ask("ex01.loss", loss_args("SmoothedCE", exp, grads=False), inputs)
    assert_consistent(seen.tensor("loss"), own.tensor("loss"), "SmoothedCE's loss while its traffic was watched")
    events = sum(seen.counts("syncs").values()) + sum(seen.counts("host_tensors").values())
    if events:
        raise Shortfall(
            f"SmoothedCE moves data between host and device on every call: {seen.text('summary')}. " + TRAFFIC_HINT,
            measured=events,
            required=0,
        )
    return Measured(0, 0, "no syncs, no host-built tensors")


def _speed(learner, ctx, check_id: str, label: str, compiled: bool) -> Measured:
    """Interleaved timing of the grader's naive loss (here) vs the learner's (in the worker), forward + backward."""
    p = ctx.profile
    exp = _profile_case(ctx)
    staged = learner.ask(
        "ex01.timed_loss",
        {**loss_args("SmoothedCE", exp, grads=True, compiled=compiled), "handle": "loss"},
        {"logits": exp.logits, "target": exp.target} if compiled else {},
    )
    if compiled and not staged.value("loss_ops", int):  # a precondition, not a speedup: no measurement
        raise AssertionError(
            f"the timed loss compiled {staged.value('frames', int)} frame(s) and none holds the loss's operators "
            "(log_softmax, exp, log, ...): it ran eagerly. compile_loss must return the loss compiled: "
            "torch.compile(loss, backend=backend, fullgraph=True)."
        )
    naive = NaiveSmoothedCE(exp.weights, exp.case.smoothing, exp.case.ignore_index).to(ctx.device)

    def baseline(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        out = naive(logits, target)
        out.backward()
        return out

    def make_args(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        logits, target, _ = sample_inputs(p.loss_batch, p.loss_classes, ctx.seed("ex01.speed inputs", i))
        return logits.detach(), target

    def verify(out: torch.Tensor, args: tuple) -> None:
        want, _ = smoothed_ce(args[0], args[1], exp.weights, exp.case.smoothing, exp.case.ignore_index)
        assert_close(out, want, torch.float32, f"{label} during timing", VALUE_HINT)

    result, required = compare_checked(
        learner,
        ctx,
        check_id,
        "loss",
        baseline,
        make_args,
        grads=(True, False),
        verify=verify,
        work=(1, "losses computed by a graph that holds the loss") if compiled else None,
    )
    shown, _ = distinct(result.speedup, required)  # never printed equal to the threshold it misses
    detail = (
        f"{shown} the grader's naive loss (median of {result.trials} interleaved trials, "
        f"95% CI {result.low:.1f}-{result.high:.1f})"
    )
    if result.speedup < required:
        raise Shortfall(
            f"{label} is too slow: {detail}. Profile one call with coursekit.traffic.watch_traffic "
            "and torch.profiler: per-call tensor building, syncs and per-class Python loops are the "
            "usual costs.",
            measured=result.speedup,
            required=required,
        )
    return Measured(result.speedup, required, detail)


@check("ex01.smoothed_ce.speed", kind="speed", points=2, needs=("SmoothedCE",))
def smoothed_ce_speed(learner, ctx) -> Measured:
    """SmoothedCE (forward + backward) beats the grader's naive loss by the device's threshold."""
    return _speed(learner, ctx, "ex01.smoothed_ce.speed", "SmoothedCE", compiled=False)


@check("ex01.compiled.values", kind="correctness", points=1, needs=("compile_loss", "SmoothedCE"))
def compiled_values(learner, ctx) -> None:
    """compile_loss(SmoothedCE(...)) gives the same values and gradients as the reference."""
    cases = [stored(PUBLIC_CASES[2]), live(hidden_cases(ctx)[1])]
    expect_values(learner, "SmoothedCE", cases, grads=True, label="compiled SmoothedCE", compiled=True)


@check("ex01.compiled.single_graph", kind="structure", points=2, needs=("compile_loss", "SmoothedCE"))
def compiled_single_graph(learner, ctx) -> Measured:
    """SmoothedCE compiles to one graph with no breaks, and compile_loss compiles it once for three batches of one
    shape."""
    exp = _profile_case(ctx)
    batches = [sample_inputs(exp.case.rows, exp.case.classes, exp.case.seed + i) for i in range(3)]
    inputs = {"logits0": exp.logits, "target0": exp.target}
    for i, (logits, target, _) in enumerate(batches):
        inputs |= {f"logits{i}": logits.detach(), f"target{i}": target}
    seen = learner.ask("ex01.graphs", loss_args("SmoothedCE", exp, grads=True), inputs)
    losses = seen.tensor("losses", shape=(3,))
    for i in range(3):
        own = learner.ask(
            "ex01.loss",
            {**loss_args("SmoothedCE", exp, grads=False, compiled=True), "reset": i == 0},
            {"logits": inputs[f"logits{i}"], "target": inputs[f"target{i}"]},
        )
        assert_consistent(
            losses[i], own.tensor("loss"), f"the compiled SmoothedCE's loss on batch {i}", rtol=1e-4, atol=1e-6
        )
    graphs, breaks = seen.value("graph_count", int), seen.value("break_count", int)
    if breaks or graphs != 1:
        reasons = "; ".join(seen.strings("reasons"))
        raise Shortfall(
            f"SmoothedCE compiles to {graphs} graph(s) with {breaks} break(s): "
            f"{reasons or 'see TORCH_LOGS=graph_breaks'}. A host read usually causes this: .item(), .tolist(), a "
            "Python if on a tensor, or an assert whose message is an f-string (a plain assert cond, 'text' becomes "
            "torch._assert_async and does not break).",
            measured=graphs,
            required=1,
        )
    frames = seen.value("frames", int)
    if frames == 0:
        raise Shortfall(
            "compile_loss did not compile anything: return torch.compile(loss, backend=backend, fullgraph=True)",
            measured=0,
            required=1,
        )
    if frames != 1:
        raise Shortfall(
            f"three batches of the same shape compiled {frames} times; expected once. Something in "
            "forward changes between calls (a Python number or flag attribute that forward updates, a call "
            "counter say?). "
            "TORCH_LOGS=recompiles says why.",
            measured=frames,
            required=1,
        )
    loss_calls = seen.value("loss_calls", int)
    if loss_calls < 3:
        raise Shortfall(
            f"only {loss_calls} of three batches returned a loss that a compiled graph holding the loss computed "
            "from their own inputs; the others ran eagerly (past the recompile limit a plain compile falls back to "
            "eager with one warning), or beside a graph whose result was not the loss. Return "
            "torch.compile(loss, backend=backend, fullgraph=True) and nothing around it.",
            measured=loss_calls,
            required=3,
        )
    return Measured(1, 1, "one graph, compiled once")


@check("ex01.compiled.speed", kind="speed", points=1, needs=("compile_loss", "SmoothedCE"))
def compiled_speed(learner, ctx) -> Measured:
    """The compiled SmoothedCE beats the grader's naive loss by the device's threshold."""
    return _speed(learner, ctx, "ex01.compiled.speed", "compiled SmoothedCE", compiled=True)


def _tiny_training(ctx, seed: int) -> tuple[dict[str, torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
    """The judge's starting weights and batches (CPU)."""
    torch.manual_seed(seed)
    model = ToyConvNet(image_size=16, num_classes=10)
    gen = torch.Generator().manual_seed(ctx.seed("ex01.training batches"))
    batches = [(torch.randn(8, 3, 16, 16, generator=gen), torch.randint(0, 10, (8,), generator=gen)) for _ in range(3)]
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, batches


def _training_inputs(state: dict, batches: list, class_weights: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    inputs = {f"model.{k}": v for k, v in state.items()}
    for i, (images, labels) in enumerate(batches):
        inputs |= {f"images{i}": images, f"labels{i}": labels}
    return inputs if class_weights is None else inputs | {"class_weights": class_weights}


def _class_weights(ctx, seed: int) -> torch.Tensor:
    """Class weights (0.14-7.4, log-uniform) for a weighted cross-entropy: its micro-batches' normalisers differ,
    so one backward over the whole batch does not give the accumulated update (over 20 seeds its parameters after
    three steps differed from the accumulated ones by at least 64 times the tolerance)."""
    return torch.exp(
        torch.rand(10, generator=torch.Generator().manual_seed(ctx.seed("ex01.class weights", seed))) * 4 - 2
    )


@check("ex01.train_step.update", kind="correctness", points=2, needs=("train_step",))
def train_step_update(learner, ctx) -> None:
    """train_step updates the model exactly like the grader's step (gradients accumulated over equal micro-batches,
    clipped to max_norm, one optimizer step) and returns the batch's mean loss, for two settings."""
    for seed, micro_batches, max_norm in ((1, 4, 0.05), (3, 2, 100.0)):  # clipping active, then not
        state, batches = _tiny_training(ctx, seed=seed)
        weights = _class_weights(ctx, seed)
        step_args = {"micro_batches": micro_batches, "max_norm": max_norm}
        got = learner.ask("ex01.train", {"steps": len(batches), **step_args}, _training_inputs(state, batches, weights))
        model = ToyConvNet(image_size=16, num_classes=10)
        model.load_state_dict(state)
        model = model.to(ctx.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses = got.tensor("losses", shape=(len(batches),))
        setting = f"micro_batches={micro_batches}, max_norm={max_norm}, a class-weighted cross-entropy"
        for step, (images, labels) in enumerate(batches):
            loss_fn = nn.CrossEntropyLoss(weight=weights.to(ctx.device))
            want = accumulated_step(
                model, loss_fn, optimizer, images.to(ctx.device), labels.to(ctx.device), **step_args
            )
            assert_close(
                losses[step],
                want,
                torch.float32,
                f"loss returned by train_step at step {step} ({setting})",
                "Return the batch's mean loss: the micro-batches' losses, each divided by micro_batches, summed.",
            )
        assert_parameters_close(
            got,
            "param.",
            model,
            f"after {len(batches)} steps ({setting})",
            "Each step must zero the gradients, run forward and backward on each micro-batch with its loss "
            "divided by micro_batches, clip the total gradient norm to max_norm "
            "(torch.nn.utils.clip_grad_norm_), then call optimizer.step() once.",
        )


@check("ex01.train_step.no_sync", kind="structure", points=2, needs=("train_step",))
def train_step_no_sync(learner, ctx) -> Measured:
    """train_step never waits for the device: no .item(), float(), Python if on a tensor, printing or asserting."""
    state, batches = _tiny_training(ctx, seed=2)
    step_args = {"micro_batches": 4, "max_norm": 0.05}
    seen = learner.ask("ex01.train_sync", step_args, _training_inputs(state, batches[:2]))
    own = learner.ask("ex01.train", {"steps": 2, **step_args}, _training_inputs(state, batches[:2]))
    assert_consistent(seen.tensor("loss"), own.tensor("losses", shape=(2,))[1], "the loss of train_step's second step")
    syncs = sync_waits(seen.counts("syncs"), ctx.device)
    if syncs:
        raise Shortfall(
            f"train_step synchronises with the device: {seen.text('summary')}. Keep the loss as a tensor and add "
            "the micro-batches' losses on the device; clip without a Python `if` on the norm; log every N steps, "
            "outside the step.",
            measured=syncs,
            required=0,
        )
    return Measured(0, 0, "no syncs in the step")
