"""Exercise 1, hidden checks: the smoothed, weighted, masked cross-entropy ladder.

The public checks and the helpers they share live in ``grader.checks.ex01_public``
(which ships to learners); this module adds the hidden ones and never ships.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from coursekit.ex01 import IGNORE_INDEX, NaiveSmoothedCE, sample_inputs
from coursekit.models import ToyConvNet
from coursekit.timing import compare
from coursekit.training import train_step as reference_train_step
from coursekit.traffic import watch_traffic
from grader.checks.common import assert_close
from grader.checks.ex01_public import VALUE_HINT, Case, _build, _check_values, public_cases
from grader.reference.ex01 import smoothed_ce
from grader.registry import Measured, Shortfall, check, in_report_order

TRAFFIC_HINT = (
    "Build tensors from Python data once, in __init__ (register_buffer), not per call (aten::lift_fresh); "
    "never read tensor values on the host inside the loss: no .item(), .tolist(), assert or if on a tensor, "
    "no boolean-mask indexing like x[mask] (aten::nonzero); mask with torch.where or multiplication and index "
    "rows with gather or torch.arange. Note: F.cross_entropy with class weights AND label smoothing reads a "
    "count on the host internally, so this rung must be written by hand."
)


def hidden_cases(ctx) -> list[Case]:
    """Cases the learner never sees: a secret seed, large logits, float64."""
    rng = random.Random(ctx.secret_seed)
    return [
        Case("secret seed", rng.randint(2, 300), rng.randint(2, 64), seed=ctx.secret_seed,
             smoothing=rng.choice([0.0, 0.05, 0.1, 0.2]), ignore_index=rng.choice([IGNORE_INDEX, 0])),
        Case("large logits", 128, 10, seed=5, scale=60.0),
        Case("float64", 100, 20, seed=6, smoothing=0.2, dtype=torch.float64),
    ]


@check("ex01.smoothed_ce.gradients", kind="correctness", points=2, needs=("SmoothedCE",))
def smoothed_ce_gradients(sub, ctx) -> None:
    """SmoothedCE's values and gradients match on all cases, hidden ones included (secret seed, large logits, float64)."""
    cases = public_cases(ctx) + hidden_cases(ctx)
    _check_values(sub.get("SmoothedCE"), cases, ctx, grads=True, label="SmoothedCE")


def _profile_case(ctx) -> Case:
    return Case("profile size", ctx.profile.loss_batch, ctx.profile.loss_classes, seed=ctx.secret_seed % 1000)


@check("ex01.smoothed_ce.no_host_traffic", kind="structure", points=2, needs=("SmoothedCE",))
def smoothed_ce_no_host_traffic(sub, ctx) -> Measured:
    """SmoothedCE's forward and backward make no host-built tensors and no device-to-host syncs."""
    case = _profile_case(ctx)
    logits, target, weights = case.inputs(ctx.device)
    loss = _build(sub.get("SmoothedCE"), weights, case, ctx.device)
    for _ in range(2):  # warm-up: lazy initialisation is allowed on the first calls
        loss(logits, target).backward()
    with watch_traffic(ctx.device) as traffic:
        loss(logits, target).backward()
    events = traffic.sync_count + traffic.host_tensor_count
    if events:
        raise Shortfall(f"SmoothedCE moves data between host and device on every call: {traffic.summary()}. "
                        + TRAFFIC_HINT, measured=events, required=0)
    return Measured(0, 0, "no syncs, no host-built tensors")


def _speed(ctx, check_id: str, candidate_loss, label: str) -> Measured:
    """Interleaved timing of the grader's naive loss vs ``candidate_loss``, forward + backward."""
    p = ctx.profile
    case = _profile_case(ctx)
    _, _, weights = case.inputs(ctx.device)
    naive = NaiveSmoothedCE(weights, case.smoothing, case.ignore_index).to(ctx.device)
    candidate = candidate_loss(weights, case)

    def make_args(i: int):
        logits, target, _ = sample_inputs(p.loss_batch, p.loss_classes, case.seed, device=ctx.device)
        gen = torch.Generator().manual_seed(ctx.secret_seed + 7919 * (i + 2))
        noise = torch.randn(logits.shape, generator=gen).to(ctx.device)  # fresh values every trial
        return (logits.detach() + noise).requires_grad_(), target

    def run(loss_fn):
        def fwd_bwd(logits, target):
            out = loss_fn(logits, target)
            out.backward()
            return out
        return fwd_bwd

    def verify(out, args) -> None:
        want, _ = smoothed_ce(args[0], args[1], weights, case.smoothing, case.ignore_index)
        assert_close(out, want, torch.float32, f"{label} during timing", VALUE_HINT)

    result = compare(run(naive), run(candidate), make_args, device=ctx.device, trials=p.trials,
                     warmup=max(2, p.warmup), min_sample_s=p.min_sample_s, check=verify)
    required = ctx.required_speedup(check_id)
    detail = (f"{result.speedup:.1f}x the grader's naive loss (median of {result.trials} interleaved trials, "
              f"IQR {result.speedup_q1:.1f}-{result.speedup_q3:.1f})")
    if result.speedup < required:
        raise Shortfall(f"{label} is too slow: {detail}. Profile one call with coursekit.traffic.watch_traffic "
                        "and torch.profiler: per-call tensor building, syncs and per-class Python loops are the "
                        "usual costs.", measured=result.speedup, required=required)
    return Measured(result.speedup, required, detail, timed_s=result.timed_s)


@check("ex01.smoothed_ce.speed", kind="speed", points=2, needs=("SmoothedCE",))
def smoothed_ce_speed(sub, ctx) -> Measured:
    """SmoothedCE (forward + backward) beats the grader's naive loss by the device's threshold."""
    factory = sub.get("SmoothedCE")
    return _speed(ctx, "ex01.smoothed_ce.speed", lambda w, c: _build(factory, w, c, ctx.device), "SmoothedCE")


def _compiled(sub, ctx, backend="inductor"):
    compile_loss = sub.get("compile_loss")
    factory = sub.get("SmoothedCE")

    def wrap(module: nn.Module):
        compiled = compile_loss(module, backend=backend)
        if not callable(compiled):
            raise AssertionError(f"compile_loss should return a callable, got {type(compiled).__name__}")
        return compiled

    return factory, wrap


@check("ex01.compiled.values", kind="correctness", points=1, needs=("compile_loss", "SmoothedCE"))
def compiled_values(sub, ctx) -> None:
    """compile_loss(SmoothedCE(...)) gives the same values and gradients as the reference."""
    torch.compiler.reset()
    factory, wrap = _compiled(sub, ctx)
    cases = [public_cases(ctx)[2], hidden_cases(ctx)[1]]
    _check_values(factory, cases, ctx, grads=True, label="compiled SmoothedCE", wrap=wrap)


@check("ex01.compiled.single_graph", kind="structure", points=2, needs=("compile_loss", "SmoothedCE"))
def compiled_single_graph(sub, ctx) -> Measured:
    """SmoothedCE compiles to one graph with no breaks, and compile_loss compiles it once for three batches."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.compiler.reset()
    case = _profile_case(ctx)
    logits, target, weights = case.inputs(ctx.device)
    module = _build(sub.get("SmoothedCE"), weights, case, ctx.device)
    info = torch._dynamo.explain(module)(logits, target)
    if info.graph_break_count or info.graph_count != 1:
        reasons = "; ".join(str(getattr(r, "reason", r)).splitlines()[0] for r in info.break_reasons[:3])
        raise Shortfall(f"SmoothedCE compiles to {info.graph_count} graph(s) with {info.graph_break_count} "
                        f"break(s): {reasons or 'see TORCH_LOGS=graph_breaks'}. A host read (assert, .item(), "
                        ".tolist()) or Python data inside forward usually causes this.",
                        measured=info.graph_count, required=1)
    torch.compiler.reset()
    counter = CompileCounterWithBackend("inductor")
    _, wrap = _compiled(sub, ctx, backend=counter)
    compiled = wrap(_build(sub.get("SmoothedCE"), weights, case, ctx.device))
    for seed in range(3):
        x, t, _ = sample_inputs(case.rows, case.classes, case.seed + seed, device=ctx.device)
        compiled(x, t).backward()
    if counter.frame_count == 0:
        raise Shortfall("compile_loss did not compile anything: return torch.compile(loss, backend=backend, "
                        "fullgraph=True)", measured=0, required=1)
    if counter.frame_count != 1:
        raise Shortfall(f"three batches of the same shape compiled {counter.frame_count} times; expected once. "
                        "Something in forward changes between calls (a Python number attribute? a new tensor "
                        "built each call?). TORCH_LOGS=recompiles says why.",
                        measured=counter.frame_count, required=1)
    return Measured(1, 1, "one graph, compiled once")


@check("ex01.compiled.speed", kind="speed", points=1, needs=("compile_loss", "SmoothedCE"))
def compiled_speed(sub, ctx) -> Measured:
    """The compiled SmoothedCE beats the grader's naive loss by the device's threshold."""
    torch.compiler.reset()
    factory, wrap = _compiled(sub, ctx)
    return _speed(ctx, "ex01.compiled.speed", lambda w, c: wrap(_build(factory, w, c, ctx.device)),
                  "compiled SmoothedCE")


def _tiny_training(ctx, seed: int):
    torch.manual_seed(seed)
    model = ToyConvNet(image_size=16, num_classes=10).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(ctx.secret_seed)
    batches = [(torch.randn(8, 3, 16, 16, generator=gen).to(ctx.device),
                torch.randint(0, 10, (8,), generator=gen).to(ctx.device)) for _ in range(3)]
    return model, optimizer, batches


@check("ex01.train_step.update", kind="correctness", points=2, needs=("train_step",))
def train_step_update(sub, ctx) -> None:
    """train_step updates the model exactly like a reference step (zero_grad, backward, step) and returns the loss."""
    learner_step = sub.get("train_step")
    loss_fn = nn.CrossEntropyLoss()
    model, optimizer, batches = _tiny_training(ctx, seed=1)
    ref_model, ref_optimizer, _ = _tiny_training(ctx, seed=1)
    for step, (images, labels) in enumerate(batches):
        got = learner_step(model, loss_fn, optimizer, images, labels)
        want = reference_train_step(ref_model, loss_fn, ref_optimizer, images, labels)
        if isinstance(got, (float, int)):
            raise AssertionError("train_step returned a Python number: `.item()` makes the host wait for the "
                                 "device every step. Return `loss.detach()` and read it only when you log.")
        assert_close(got, want, torch.float32, f"loss returned by train_step at step {step}")
        if got.requires_grad:
            raise AssertionError("train_step returned a loss that still holds the autograd graph: return "
                                 "loss.detach()")
    for (name, p), ref in zip(model.named_parameters(), ref_model.parameters()):
        assert_close(p, ref, torch.float32, f"parameter {name} after {len(batches)} steps",
                     "Each step must zero the gradients, run forward and backward once, then optimizer.step().")


@check("ex01.train_step.no_sync", kind="structure", points=2, needs=("train_step",))
def train_step_no_sync(sub, ctx) -> Measured:
    """train_step never waits for the device: no .item(), .tolist(), printing or asserting on tensor values."""
    learner_step = sub.get("train_step")
    model, optimizer, batches = _tiny_training(ctx, seed=2)
    loss_fn = nn.CrossEntropyLoss()
    learner_step(model, loss_fn, optimizer, *batches[0])
    with watch_traffic(ctx.device) as traffic:
        learner_step(model, loss_fn, optimizer, *batches[1])
    if traffic.sync_count:
        raise Shortfall(f"train_step synchronises with the device: {traffic.summary()}. Keep the loss as a "
                        "tensor; log it every N steps, outside the step.", measured=traffic.sync_count, required=0)
    return Measured(0, 0, "no syncs in the step")


# Report rows follow the notebook, public and hidden checks interleaved as the tasks come.
ORDER = ("ex01.smoothed_ce.values", "ex01.smoothed_ce.gradients", "ex01.smoothed_ce.no_host_traffic",
         "ex01.smoothed_ce.speed", "ex01.builtin.values", "ex01.compiled.values", "ex01.compiled.single_graph",
         "ex01.compiled.speed", "ex01.train_step.update", "ex01.train_step.no_sync")


in_report_order(ORDER)
