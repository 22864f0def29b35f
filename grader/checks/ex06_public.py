"""Exercise 6, public checks: regional compilation and a training loop that never recompiles.

This module ships in the learner kit (``make release``). The hidden checks (another model shape, other
schedules, the measured compile-time ratio) live in ``grader.checks.ex06``, which imports from here.

Compiles here use the cheap backends ``aot_eager`` and ``eager`` wrapped in a counter: what is checked
(how many graphs, which code they hold, whether a new learning rate recompiles, the values) is decided
before Inductor runs, and it keeps every check to seconds on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from coursekit.ex06 import (
    DEPTH,
    LR,
    STEPS,
    WEIGHT_DECAY,
    loss_fn,
    make_batch,
    make_model,
    make_scheduler,
)
from grader.checks.common import assert_close, require_tensor
from grader.registry import Measured, Unsettled, check

STEP_DEPTH = 2  # the training-loop checks use a shallow model: compiling AdamW's step costs time per parameter
LINEARS_PER_BLOCK = 4  # a timm ViT block: qkv and proj in attention, fc1 and fc2 in the MLP
REGIONAL_HINT = ("Compile each block of model.blocks in place with block.compile(backend=backend) and return the "
                 "model: the blocks share one compiled graph, and the rest of the model stays eager.")
HYGIENE_HINT = ("Keep the learning rate in a tensor (AdamW(..., lr=torch.tensor(lr))): the scheduler then writes "
                "each new rate into that tensor, which a compiled graph reads as an input, where a Python float "
                "is a constant that Dynamo guards on and recompiles for.")
STEP_HINT = ("step(images, labels) computes the cross-entropy of model(images), calls backward, runs the compiled "
             "optimizer.step() and scheduler.step(), clears the gradients, and returns loss.detach().")


def call(fn: Callable, args: tuple, what: str, hint: str = "") -> Any:
    """``fn(*args)``; a torch error inside it becomes ``Unsettled`` with its first line (the rest of the
    grading continues in a fresh process, as a failed compile can leave torch half-way)."""
    try:
        return fn(*args)
    except (NotImplementedError, AssertionError):
        raise
    except Exception as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        gist = next((ln for ln in lines if "Error" in ln), lines[0] if lines else "")
        message = f"{what} raised {type(exc).__name__}: {gist.strip()[:300]}. {hint}".strip()
        if type(exc).__module__.startswith("torch"):
            raise Unsettled(message) from None
        raise AssertionError(message) from None


def counter(backend: str = "aot_eager"):
    """A backend that counts the frames it compiles and keeps their graphs (``.graphs``)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    return CompileCounterWithBackend(backend)


def linears(graph: torch.fx.GraphModule) -> int:
    """How many linear layers a Dynamo graph calls."""
    return sum(1 for n in graph.graph.nodes if n.op == "call_function" and "linear" in str(n.target))


def forward_backward(model: nn.Module, params: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                     what: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of ``model`` on ``batch`` and the gradients it leaves on ``params``' parameters."""
    params.zero_grad(set_to_none=True)
    loss = require_tensor(call(lambda: loss_fn()(model(batch[0]), batch[1]), (), what, REGIONAL_HINT), what)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in params.named_parameters()}


def regional(sub, ctx, seed: int, backend: Any, **shape: int) -> tuple[nn.Module, nn.Module, list[str]]:
    """A seeded model after the learner's ``compile_blocks(model, backend)``: (what it returned, the model
    handed in, that model's state_dict keys before)."""
    torch.compiler.reset()
    model = make_model(seed, ctx.device, **shape)
    keys = list(model.state_dict())
    got = call(sub.get("compile_blocks"), (model, backend), "compile_blocks", REGIONAL_HINT)
    if not isinstance(got, nn.Module):
        raise AssertionError(f"compile_blocks returned {type(got).__name__}; return the model. " + REGIONAL_HINT)
    return got, model, keys


def expect_regional_values(sub, ctx, seed: int, **shape: int) -> None:
    """``compile_blocks`` keeps the model's parameter names and computes what the eager model computes."""
    reference = make_model(seed, ctx.device, **shape)
    got, model, keys = regional(sub, ctx, seed, "aot_eager", **shape)
    new_keys = list(got.state_dict())
    if new_keys != keys:
        extra = next((k for k in new_keys if k not in keys), new_keys[0] if new_keys else "")
        raise AssertionError(f"after compile_blocks the state_dict keys changed (e.g. {extra!r}): a checkpoint of "
                             "the plain model no longer loads, nor one saved now into a plain model. Replacing a "
                             "block with torch.compile(block) wraps it in an OptimizedModule (its keys gain "
                             "'_orig_mod.'); block.compile() compiles it in place and keeps the names. "
                             + REGIONAL_HINT)
    batch = make_batch(seed + 100, ctx.device)
    want = forward_backward(reference, reference, batch, "the eager model")
    have = forward_backward(got, model, batch, "the model after compile_blocks")
    what = f"model after compile_blocks (seed {seed}, depth {len(reference.blocks)})"
    assert_close(have[0], want[0], torch.float32, f"{what}: loss", REGIONAL_HINT)
    for name, grad in want[1].items():
        if have[1].get(name) is None:
            raise AssertionError(f"{what}: no gradient reached {name}. " + REGIONAL_HINT)
        assert_close(have[1][name], grad, torch.float32, f"{what}: gradient of {name}", REGIONAL_HINT)


def expect_one_block_graph(sub, ctx, seed: int, **shape: int) -> Measured:
    """All blocks share one compiled graph that holds one block, and a second step compiles nothing."""
    count = counter("aot_eager")
    got, model, _ = regional(sub, ctx, seed, count, **shape)
    depth = len(model.blocks)
    forward_backward(got, model, make_batch(seed, ctx.device), "the model after compile_blocks")
    first = count.frame_count
    forward_backward(got, model, make_batch(seed + 1, ctx.device), "the model after compile_blocks")
    if first == 0:
        raise AssertionError("nothing was compiled with the backend handed to compile_blocks: pass "
                             "backend=backend on to compile. " + REGIONAL_HINT)
    sizes = [linears(g) for g in count.graphs]
    if max(sizes) > LINEARS_PER_BLOCK:
        raise AssertionError(f"a compiled graph holds {max(sizes)} linear layers, a block has {LINEARS_PER_BLOCK}: "
                             "that is the whole model (or several blocks) in one graph, whose compile time grows "
                             f"with depth. Regional compilation compiles the block alone. " + REGIONAL_HINT)
    if first > 1:
        raise AssertionError(f"the {depth} blocks compiled {first} graphs, not one: each block was compiled on its "
                             "own (a recompile per block), so cold compile time still grows with depth. Compile "
                             "the block's forward (block.compile()), so the blocks share one compiled graph; "
                             "torch.compiler.reset() is not needed between blocks.")
    if count.frame_count != first:
        raise AssertionError(f"a second step compiled {count.frame_count - first} more graph(s): something in the "
                             "blocks changes between steps. " + REGIONAL_HINT)
    return Measured(1, 1, f"{depth} blocks, one compiled graph of {sizes[0]} linear layers")


@check("ex06.regional.values", kind="correctness", points=2, needs=("compile_blocks",), public=True)
def regional_values(sub, ctx) -> None:
    """compile_blocks keeps the model's state_dict keys, and its loss and gradients equal the eager model's."""
    expect_regional_values(sub, ctx, seed=0)


@check("ex06.regional.one_graph", kind="structure", points=2, needs=("compile_blocks",), public=True)
def regional_one_graph(sub, ctx) -> Measured:
    """All blocks share one compiled graph of one block (not the whole model), and the next step compiles
    nothing new."""
    return expect_one_block_graph(sub, ctx, seed=1)


@check("ex06.optimizer.tensor_lr", kind="correctness", points=1, needs=("make_optimizer",), public=True)
def optimizer_tensor_lr(sub, ctx) -> None:
    """make_optimizer returns AdamW over every parameter, with the learning rate held in a tensor."""
    model = make_model(0, ctx.device, depth=STEP_DEPTH)
    for lr in (LR, 3e-4):
        opt = call(sub.get("make_optimizer"), (model, lr), "make_optimizer")
        if not isinstance(opt, torch.optim.AdamW):
            raise AssertionError(f"make_optimizer returned {type(opt).__name__}; expected torch.optim.AdamW")
        params = [p for g in opt.param_groups for p in g["params"]]
        if {id(p) for p in params} != {id(p) for p in model.parameters()} or len(params) != len(list(model.parameters())):
            raise AssertionError("make_optimizer must optimise every parameter of the model, each once")
        group = opt.param_groups[0]
        if not isinstance(group["lr"], torch.Tensor):
            raise AssertionError(f"the learning rate is a {type(group['lr']).__name__}. " + HYGIENE_HINT)
        if abs(float(group["lr"]) - lr) > 1e-9 * max(1.0, lr) or group["weight_decay"] != WEIGHT_DECAY:
            raise AssertionError(f"make_optimizer(model, lr={lr}) has lr {float(group['lr']):g} and weight decay "
                                 f"{group['weight_decay']}; expected lr {lr} and weight_decay=WEIGHT_DECAY "
                                 f"({WEIGHT_DECAY})")


def eager_run(ctx, seed: int, lr: float, schedule: Callable, steps: int) -> tuple[list[float], list[float], dict]:
    """The grader's reference loop: AdamW with a float learning rate, eager, ``steps`` steps."""
    model = make_model(seed, ctx.device, depth=STEP_DEPTH)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    sched = schedule(opt)
    criterion = loss_fn()
    losses, lrs = [], []
    for i in range(steps):
        images, labels = make_batch(seed * 1000 + i, ctx.device)
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(images), labels)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        lrs.append(float(opt.param_groups[0]["lr"]))
    return losses, lrs, {k: v.detach().clone() for k, v in model.state_dict().items()}


def learner_run(sub, ctx, seed: int, lr: float, schedule: Callable, steps: int, backend: Any,
                on_step: Callable[[int], None] | None = None) -> tuple[list[float], list[float], dict]:
    """The learner's loop: ``make_optimizer``, the given schedule and ``make_train_step`` with ``backend``."""
    torch.compiler.reset()
    model = make_model(seed, ctx.device, depth=STEP_DEPTH)
    opt = call(sub.get("make_optimizer"), (model, lr), "make_optimizer")
    sched = schedule(opt)
    step = call(sub.get("make_train_step"), (model, opt, sched, backend), "make_train_step", STEP_HINT)
    if not callable(step):
        raise AssertionError("make_train_step must return a function step(images, labels) -> loss. " + STEP_HINT)
    losses, lrs = [], []
    for i in range(steps):
        images, labels = make_batch(seed * 1000 + i, ctx.device)
        loss = require_tensor(call(step, (images, labels), f"step {i + 1} of your training loop", STEP_HINT),
                              "step's result")
        if loss.requires_grad:
            raise AssertionError("step returned a loss that still requires grad: return loss.detach(). " + STEP_HINT)
        losses.append(loss.item())
        lrs.append(float(opt.param_groups[0]["lr"]))
        if on_step is not None:
            on_step(i)
    return losses, lrs, {k: v.detach() for k, v in model.state_dict().items()}


def expect_same_training(sub, ctx, seed: int, lr: float, schedule: Callable, steps: int, what: str) -> None:
    """The learner's compiled loop follows the grader's eager loop: losses, learning rates, final weights."""
    want = eager_run(ctx, seed, lr, schedule, steps)
    have = learner_run(sub, ctx, seed, lr, schedule, steps, "aot_eager")
    for i, (a, b) in enumerate(zip(have[1], want[1])):
        if abs(a - b) > 1e-6 * max(abs(b), 1e-12) + 1e-12:
            raise AssertionError(f"{what}: after step {i + 1} the learning rate is {a:.6g}, expected {b:.6g}: call "
                                 "scheduler.step() once per step, after optimizer.step(). " + STEP_HINT)
    for i, (a, b) in enumerate(zip(have[0], want[0])):
        assert_close(torch.tensor(a), torch.tensor(b), torch.float32, f"{what}: loss at step {i + 1}", STEP_HINT)
    # Adam divides each gradient by its running size, so a weight whose gradient is rounding noise (attention's
    # key bias: softmax ignores it) moves by a noise-sized fraction of the learning rate in either loop
    atol = 0.1 * lr
    for name, value in want[2].items():
        diff = (have[2][name].double() - value.double()).abs().max().item()
        if diff > atol:
            raise AssertionError(f"{what}: {name} after {steps} steps differs from the eager loop's by {diff:.3g} "
                                 f"(allowed: a tenth of the learning rate, {atol:.3g}). " + STEP_HINT)


def expect_no_recompile(sub, ctx, seed: int, lr: float, schedule: Callable, steps: int, what: str) -> Measured:
    """After the first step the loop compiles nothing new, and AdamW's update runs inside a compiled graph."""
    count = counter("eager")
    frames: list[int] = []
    learner_run(sub, ctx, seed, lr, schedule, steps, count, on_step=lambda i: frames.append(count.frame_count))
    if frames[0] == 0:
        raise AssertionError(f"{what}: nothing was compiled with the backend handed to make_train_step: compile "
                             "the optimizer and scheduler step with torch.compile(..., backend=backend).")
    if not any("addc" in g.code for g in count.graphs):
        raise AssertionError(f"{what}: AdamW's update (its addcdiv/addcmul) is not in any compiled graph: compile "
                             "the function that calls optimizer.step() and scheduler.step().")
    if frames[-1] != frames[0]:
        grew = next(i for i, f in enumerate(frames) if f != frames[0])
        raise AssertionError(f"{what}: {frames[-1] - frames[0]} recompile(s) after the first step (the first at step "
                             f"{grew + 1}, when the scheduler changed the learning rate). " + HYGIENE_HINT)
    return Measured(frames[-1], frames[0], f"{frames[0]} compiled graph(s), none added over {steps} steps")


@check("ex06.step.values", kind="correctness", points=2, needs=("make_optimizer", "make_train_step"), public=True)
def training_values(sub, ctx) -> None:
    """The compiled training loop follows the grader's eager loop (float learning rate): losses, learning rates
    and final weights over the exercise's warm-up-then-cosine schedule."""
    expect_same_training(sub, ctx, 0, LR, make_scheduler, STEPS, "the exercise's schedule")


@check("ex06.step.no_recompile", kind="structure", points=2, needs=("make_optimizer", "make_train_step"),
       public=True)
def training_no_recompile(sub, ctx) -> Measured:
    """Over the schedule, with a new learning rate every step, the compiled optimizer step never recompiles."""
    return expect_no_recompile(sub, ctx, 1, LR, make_scheduler, STEPS, "the exercise's schedule")


__all__ = ["DEPTH", "expect_no_recompile", "expect_one_block_graph", "expect_regional_values", "expect_same_training"]
