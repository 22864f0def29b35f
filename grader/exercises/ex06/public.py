"""Exercise 6, public checks (ship in the learner kit): regional compilation and a training loop that never
recompiles. The references are the given ViT run eagerly and a plain eager loop with a float learning rate (the
exercise's starting point, not its answer). The hidden checks (another model shape, other schedules, the
measured compile-time ratio) live in ``hidden.py``.
"""

from __future__ import annotations

import torch

from coursekit.lessons.compile_time.givens import (
    DEPTH,
    HEAD_LR_SCALE,
    LR,
    STAGES,
    STEPS,
    WEIGHT_DECAY,
    loss_fn,
    make_batch,
    make_model,
)
from grader.exercises.ex06.probes import LINEARS_PER_BLOCK, REGIONAL_HINT, SCHEDULES, STEP_DEPTH, STEP_HINT, build
from grader.judging import assert_close, assert_consistent, assert_parameters_close
from grader.registry import Measured, check

HYBRID = {"model": "hybrid"}  # the exercise's HybridNet: three MixerBlocks, then three ViT Blocks
HYGIENE_HINT = (
    "Keep every group's learning rate in a tensor ({'params': ..., 'lr': torch.tensor(...)}; a group's own "
    "'lr' overrides AdamW's lr argument): the scheduler then writes each new rate into that tensor, which a "
    "compiled graph reads as an input, where a Python float is a constant that Dynamo guards on and "
    "recompiles for."
)
GROUPS_HINT = (
    "make_optimizer builds AdamW with weight_decay=WEIGHT_DECAY and two parameter groups, in this order: every "
    "parameter but model.head's at lr, then model.head's parameters at HEAD_LR_SCALE * lr."
)


def reference_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.AdamW:
    """The grader's AdamW: the body at ``lr``, the head at ``HEAD_LR_SCALE * lr``, float rates."""
    head = list(model.head.parameters())
    body = [p for p in model.parameters() if all(p is not q for q in head)]
    groups = [{"params": body, "lr": lr}, {"params": head, "lr": HEAD_LR_SCALE * lr}]
    return torch.optim.AdamW(groups, weight_decay=WEIGHT_DECAY)


def eager_loss_and_grads(ctx, seed: int, spec: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model, _ = build(spec, seed, ctx.device)
    images, labels = make_batch(seed + 100, ctx.device)
    loss = loss_fn()(model(images), labels)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def describe(spec: dict) -> str:
    if spec.get("model") == "hybrid":
        stages = spec.get("stages") or STAGES
        return "HybridNet with stages " + ", ".join(f"{n} x {kind}" for kind, n in stages)
    return f"ViT of depth {spec.get('depth', DEPTH)}"


def expect_regional_values(learner, ctx, seed: int, spec: dict) -> None:
    """``compile_blocks`` keeps the model's parameter names and computes what the eager model computes."""
    got = learner.ask("ex06.regional", {"seed": seed, "model": spec})
    before, after = got.strings("keys_before"), got.strings("keys_after")
    if after != before:
        extra = next((k for k in after if k not in before), after[0] if after else "")
        raise AssertionError(
            f"after compile_blocks the state_dict keys changed (e.g. {extra!r}): a checkpoint of "
            "the plain model no longer loads, nor one saved now into a plain model. Replacing a "
            "block with torch.compile(block) wraps it in an OptimizedModule (its keys gain "
            "'_orig_mod.'); block.compile() compiles it in place and keeps the names. " + REGIONAL_HINT
        )
    loss, grads = eager_loss_and_grads(ctx, seed, spec)
    what = f"{describe(spec)} after compile_blocks (seed {seed})"
    assert_close(got.tensor("loss"), loss, torch.float32, f"{what}: loss", REGIONAL_HINT)
    for name, grad in grads.items():
        if f"grad.{name}" not in got.tensors:
            raise AssertionError(f"{what}: no gradient reached {name}. " + REGIONAL_HINT)
        assert_close(got.tensor(f"grad.{name}"), grad, torch.float32, f"{what}: gradient of {name}", REGIONAL_HINT)


def block_counts(spec: dict, seed: int, device: str) -> tuple[int, int]:
    """How many blocks, and kinds of block, the model ``spec`` names holds: counted here, not by the worker."""
    model, block_types = build(spec, seed, device)
    blocks = [m for m in model.modules() if isinstance(m, block_types)]
    return len(blocks), len({type(m) for m in blocks})


def expect_every_block_compiled(got, blocks: int, what: str, steps: int) -> None:
    """Every block ran inside a compiled graph in ``what`` (red team, session 19: compiling one block of each kind
    and leaving the others eager had passed every regional check, its cold capture 5.8x against the reference's
    4.8x). Two counts from the probe: the linear-layer calls made inside compiled graphs in each of ``steps``
    steps, which must reach ``blocks * LINEARS_PER_BLOCK``, and the blocks whose own weights a compiled graph of a
    whole block read (an eager block that also calls a compiled one does not count)."""
    calls, compiled = got.ints("compiled_linears"), got.value("compiled_blocks", int)
    if len(calls) != steps:
        from grader.protocol import ProtocolError

        raise ProtocolError(f"the probe answered {len(calls)} linear-layer counts for {steps} step(s)")
    want = blocks * LINEARS_PER_BLOCK
    if min(calls) < want or compiled < blocks:
        raise AssertionError(
            f"in {what} {compiled} of the model's {blocks} blocks ran in a compiled training graph (grad mode on, "
            f"so its backward is compiled too) with their own weights, and {min(calls)} of their {want} "
            "linear-layer calls ran inside compiled graphs: some blocks ran eagerly, or were compiled under no_grad "
            "with their backward left eager. Compile every instance of every type in block_types (model.modules() "
            "walks them all), not one per kind: they share its compiled graph. " + REGIONAL_HINT
        )


def expect_one_graph_per_kind(learner, ctx, seed: int, spec: dict) -> Measured:
    """The blocks of each kind share one compiled graph that holds one block, and a second step compiles
    nothing."""
    got = learner.ask("ex06.regional_graphs", {"seed": seed, "model": spec})
    losses = got.tensor("losses", shape=(2,))
    for i in range(2):
        model, _ = build(spec, seed, ctx.device)
        images, labels = make_batch(seed + i, ctx.device)
        with torch.no_grad():
            assert_close(
                losses[i],
                loss_fn()(model(images), labels),
                torch.float32,
                f"the model after compile_blocks, loss of step {i + 1}",
                REGIONAL_HINT,
            )
    blocks, kinds = block_counts(spec, seed, ctx.device)
    first, second = got.value("frames_first", int), got.value("frames_second", int)
    sizes = got.ints("linears")
    if first == 0:
        raise AssertionError(
            "nothing was compiled with the backend handed to compile_blocks: pass "
            "backend=backend on to compile. " + REGIONAL_HINT
        )
    if sizes and max(sizes) > LINEARS_PER_BLOCK:
        raise AssertionError(
            f"a compiled graph holds {max(sizes)} linear layers, a block has {LINEARS_PER_BLOCK}: "
            "that is the whole model (or several blocks) in one graph, whose compile time grows "
            f"with depth. Regional compilation compiles the block alone. " + REGIONAL_HINT
        )
    if first < kinds:
        raise AssertionError(
            f"the {describe(spec)} holds {kinds} kinds of block, but {first} graph(s) were compiled: a kind of "
            "block was left eager. Look for every instance of every type in block_types, wherever it sits "
            "(model.modules() walks them all). " + REGIONAL_HINT
        )
    if first > kinds:
        raise AssertionError(
            f"the {blocks} blocks of {kinds} kind(s) compiled {first} graphs, not {kinds}: blocks of one kind "
            "did not share one graph (a recompile per block), so cold compile time still grows with depth. Blocks "
            "of one class share a graph however each is compiled, unless something differs between them: "
            "torch.compiler.reset() between blocks, another backend object per block, or a Python value that "
            "differs per block. Compile each block in place with module.compile(backend=backend), one backend "
            "for all."
        )
    if second != first:
        raise AssertionError(
            f"a second step compiled {second - first} more graph(s): something in the "
            "blocks changes between steps. " + REGIONAL_HINT
        )
    expect_every_block_compiled(got, blocks, "each step", steps=2)
    return Measured(  # graphs compiled, against one per kind of block
        first,
        kinds,
        f"{blocks} blocks of {kinds} kind(s): {first} compiled graph(s), one per kind, of "
        f"{sorted(sizes)} linear layers",
    )


@check("ex06.regional.values", kind="correctness", points=2, needs=("compile_blocks",), public=True)
def regional_values(learner, ctx) -> None:
    """compile_blocks keeps the hybrid model's state_dict keys, and its loss and gradients equal the eager
    model's."""
    expect_regional_values(learner, ctx, 0, HYBRID)


@check("ex06.regional.one_graph", kind="structure", points=2, needs=("compile_blocks",), public=True)
def regional_one_graph(learner, ctx) -> Measured:
    """The hybrid model's blocks of each kind share one compiled graph of one block (not the whole model), and
    the next step compiles nothing new."""
    return expect_one_graph_per_kind(learner, ctx, 1, HYBRID)


@check("ex06.optimizer.tensor_lr", kind="correctness", points=1, needs=("make_optimizer",), public=True)
def optimizer_tensor_lr(learner, ctx) -> None:
    """make_optimizer returns AdamW over every parameter, the body and the head in two groups at their rates, each
    rate held in a tensor."""
    lrs = [LR, 3e-4]
    model = make_model(0, ctx.device, depth=STEP_DEPTH)
    gen = torch.Generator().manual_seed(ctx.seed("ex06.optimizer gradients"))
    grads = {name: torch.randn(p.shape, generator=gen) for name, p in model.named_parameters()}
    got = learner.ask("ex06.optimizer", {"lrs": lrs}, {f"grad.{n}": g for n, g in grads.items()})
    found = got.value("optimizers", list)
    for lr, opt in zip(lrs, found):
        if not isinstance(opt, dict):
            from grader.protocol import ProtocolError

            raise ProtocolError("probe ex06.optimizer answered with a malformed optimizer description")
        if not opt.get("adamw"):
            raise AssertionError(f"make_optimizer returned {str(opt.get('type'))[:40]}; expected torch.optim.AdamW")
        if not opt.get("every_param_once"):
            raise AssertionError("make_optimizer must optimise every parameter of the model, each once")
        groups = opt.get("groups") or []
        holds = [g.get("holds") for g in groups if isinstance(g, dict)]
        if holds != ["body", "head"]:
            raise AssertionError(
                f"make_optimizer's parameter groups hold {holds}; expected ['body', 'head']. " + GROUPS_HINT
            )
        for group, want in zip(groups, (lr, HEAD_LR_SCALE * lr)):
            if not group.get("lr_is_tensor"):
                raise AssertionError(
                    f"the {group['holds']} group's learning rate is a {str(group.get('lr_type'))[:40]}. " + HYGIENE_HINT
                )
            rate, decay = group.get("lr"), group.get("weight_decay")
            if not isinstance(rate, float) or not abs(rate - want) <= 1e-9 * max(1.0, want) or decay != WEIGHT_DECAY:
                raise AssertionError(
                    f"make_optimizer(model, lr={lr}): the {group['holds']} group has lr {rate} and weight decay "
                    f"{decay}; expected lr {want:g} and weight_decay=WEIGHT_DECAY ({WEIGHT_DECAY}). " + GROUPS_HINT
                )
    reference = reference_optimizer(model, lrs[0])
    for name, p in model.named_parameters():
        p.grad = grads[name].to(p.device)
    reference.step()
    assert_parameters_close(
        got,
        "w.",
        model,
        f"after one step of make_optimizer(model, lr={lrs[0]})",
        GROUPS_HINT,
    )


def eager_run(ctx, seed: int, lr: float, schedule: str, steps: int) -> tuple[list[float], list[list[float]], dict]:
    """The grader's reference loop: AdamW with float learning rates, eager, ``steps`` steps."""
    model = make_model(seed, ctx.device, depth=STEP_DEPTH)
    opt = reference_optimizer(model, lr)
    sched = SCHEDULES[schedule](opt)
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
        lrs.append([float(g["lr"]) for g in opt.param_groups])
    return losses, lrs, {k: v.detach().clone() for k, v in model.state_dict().items()}


def loop_args(seed: int, lr: float, schedule: str, steps: int) -> dict:
    return {"seed": seed, "lr": lr, "schedule": schedule, "steps": steps}


def expect_same_training(learner, ctx, seed: int, lr: float, schedule: str, steps: int, what: str) -> None:
    """The learner's compiled loop follows the grader's eager loop: losses, learning rates, final weights."""
    want_losses, want_lrs, want_state = eager_run(ctx, seed, lr, schedule, steps)
    got = learner.ask("ex06.train", loop_args(seed, lr, schedule, steps))
    lrs, losses = got.value("lrs", list), got.tensor("losses", shape=(steps,))
    for i, (a, b) in enumerate(zip(lrs, want_lrs)):
        if not (isinstance(a, list) and len(a) == len(b)):
            raise AssertionError(f"{what}: after step {i + 1} the optimizer has rates {str(a)[:80]}. " + GROUPS_HINT)
        for x, y in zip(a, b):
            if not isinstance(x, float) or not abs(x - y) <= 1e-6 * max(abs(y), 1e-12) + 1e-12:
                raise AssertionError(
                    f"{what}: after step {i + 1} the learning rates are {[f'{v:.6g}' for v in a]}, expected "
                    f"{[f'{v:.6g}' for v in b]}: call scheduler.step() once per step, after optimizer.step(). "
                    + STEP_HINT
                )
    for i, b in enumerate(want_losses):
        assert_close(losses[i], torch.tensor(b), torch.float32, f"{what}: loss at step {i + 1}", STEP_HINT)
    # Adam divides each gradient by its running size, so a weight whose gradient is rounding noise (attention's
    # key bias: softmax ignores it) moves by a noise-sized fraction of the learning rate in either loop
    for name, value in want_state.items():
        atol = 0.1 * lr * (HEAD_LR_SCALE if name.startswith("head.") else 1.0)
        diff = (got.tensor(f"w.{name}", shape=tuple(value.shape)).double() - value.double().cpu()).abs().max().item()
        if not diff <= atol:  # false for nan too
            raise AssertionError(
                f"{what}: {name} after {steps} steps differs from the eager loop's by {diff:.3g} "
                f"(allowed: a tenth of its learning rate, {atol:.3g}). " + STEP_HINT
            )


def expect_no_recompile(learner, ctx, seed: int, lr: float, schedule: str, steps: int, what: str) -> Measured:
    """After the first step the loop compiles nothing new, and AdamW's update runs inside a compiled graph."""
    got = learner.ask("ex06.train_frames", loop_args(seed, lr, schedule, steps))
    own = learner.ask("ex06.train", loop_args(seed, lr, schedule, steps))
    assert_consistent(
        got.tensor("losses", shape=(steps,)),
        own.tensor("losses", shape=(steps,)),
        f"{what}: the losses of the counted loop",
        rtol=1e-4,
        atol=1e-6,
    )
    frames = got.ints("frames")
    if len(frames) != steps:
        from grader.protocol import ProtocolError

        raise ProtocolError("probe ex06.train_frames answered with the wrong number of frame counts")
    if frames[0] == 0:
        raise AssertionError(
            f"{what}: nothing was compiled with the backend handed to make_train_step: compile "
            "the optimizer and scheduler step with torch.compile(..., backend=backend)."
        )
    if not got.value("adam_in_graph", bool):
        foreign = [str(name)[:80] for name in got.value("foreign", list)[:5]]
        hidden = (
            f" (your compiled graphs call {', '.join(foreign)}: code in a custom op or a function let into the graph "
            "runs as it is, uncompiled, and the update must be torch's own operations in the graph)"
            if foreign
            else ""
        )
        raise AssertionError(
            f"{what}: AdamW's update (its addcdiv/addcmul) is not in any compiled graph{hidden}: compile "
            "the function that calls optimizer.step() and scheduler.step()."
        )
    updated = got.ints("compiled_updates")
    if len(updated) != steps:
        from grader.protocol import ProtocolError

        raise ProtocolError("probe ex06.train_frames answered with the wrong number of update flags")
    idle = [i + 1 for i in range(steps) if not updated[i]]
    if idle:
        raise AssertionError(
            f"{what}: at step {idle[0]} (and {len(idle) - 1} other(s) of {steps}) no compiled graph updated the "
            "model's parameters with AdamW: every step must call the compiled optimizer.step() and "
            "scheduler.step(), or the count of recompiles says nothing about the steps that ran eagerly. "
            + HYGIENE_HINT
        )
    if frames[-1] != frames[0]:
        grew = next(i for i, f in enumerate(frames) if f != frames[0])
        raise AssertionError(
            f"{what}: {frames[-1] - frames[0]} recompile(s) after the first step (the first at step "
            f"{grew + 1}, when the scheduler changed the learning rate). " + HYGIENE_HINT
        )
    expect_update_compiled(got, steps, what)
    return Measured(frames[-1], frames[0], f"{frames[0]} compiled graph(s), none added over {steps} steps")


def expect_update_compiled(got, steps: int, what: str) -> None:
    """AdamW's update ran inside the compiled graphs, not beside them: no call of torch's AdamW update functions
    outside a compile, no change to the parameters or AdamW's running averages outside a compiled graph, and those
    averages updated in place in every step (red team, session 37: optimizer.step() and scheduler.step() run
    eagerly, then a compiled out-of-place addcmul of every parameter under no_grad, had passed both recompile checks
    with float rates; session 47: AdamW by hand into copies, copied into the parameters by a compiled graph)."""
    eager, writes, moved = got.ints("eager_updates"), got.ints("eager_writes"), got.ints("averages_moved")
    reads, grads = got.ints("foreign_reads"), got.ints("grads_changed")
    if any(len(counts) != steps for counts in (eager, writes, moved, reads, grads)):
        from grader.protocol import ProtocolError

        raise ProtocolError("probe ex06.train_frames answered with the wrong number of eager-update counts")
    ran = [i + 1 for i in range(steps) if eager[i] or writes[i]]
    if ran:
        how = (
            "torch's AdamW update ran outside any compile (optimizer.step() called eagerly; on a GPU also when "
            "the optimizer's state was built by an eager step before the first compiled one, since Dynamo then "
            "cannot make it capturable and AdamW falls back to eager)"
            if eager[ran[0] - 1]
            else "the model's parameters or AdamW's running averages changed outside any compiled graph"
        )
        raise AssertionError(
            f"{what}: at step {ran[0]} (and {len(ran) - 1} other(s) of {steps}) {how}: AdamW's update ran eagerly, "
            "and a compiled graph beside it that reads the parameters is not the update. Call optimizer.step() and "
            "scheduler.step() inside the function compiled with torch.compile(..., backend=backend). " + STEP_HINT
        )
    handed = [i + 1 for i in range(steps) if reads[i]]
    if handed:  # session 48: AdamW by hand into copies, copied into the parameters and averages by a graph
        raise AssertionError(
            f"{what}: at step {handed[0]} (and {len(handed) - 1} other(s) of {steps}) the compiled graph that "
            "updates the parameters read tensors other than the parameters, their gradients, AdamW's own state "
            "and the learning rates: values computed outside the graph and copied in, not AdamW's update "
            "computed by it. Call optimizer.step() and scheduler.step() inside the function compiled with "
            "torch.compile(..., backend=backend). " + STEP_HINT
        )
    changed = [i + 1 for i in range(steps) if grads[i]]
    if changed:  # session 48: AdamW by hand, the new parameters written into the gradients, copied in by a graph
        raise AssertionError(
            f"{what}: at step {changed[0]} (and {len(changed) - 1} other(s) of {steps}) the gradients had changed "
            "between backward and the compiled graph that updates the parameters: that graph must be handed the "
            "gradients backward computed, and compute AdamW's update from them. Call optimizer.step() and "
            "scheduler.step() inside the function compiled with torch.compile(..., backend=backend). " + STEP_HINT
        )
    still = [i + 1 for i in range(steps) if not moved[i]]
    if still:
        raise AssertionError(
            f"{what}: after step {still[0]} (and {len(still) - 1} other(s) of {steps}) AdamW's running averages "
            "(optimizer.state[p]['exp_avg'] and ['exp_avg_sq'] for every parameter) were missing, replaced by new "
            "tensors or left as they were: the compiled optimizer.step() updates them in place at every step. Keep "
            "the optimizer make_optimizer built and call its step() inside the compiled function. " + STEP_HINT
        )


@check("ex06.step.values", kind="correctness", points=2, needs=("make_optimizer", "make_train_step"), public=True)
def training_values(learner, ctx) -> None:
    """The compiled training loop follows the grader's eager loop (float learning rate): losses, learning rates
    and final weights over the exercise's warm-up-then-cosine schedule."""
    expect_same_training(learner, ctx, 0, LR, "exercise", STEPS, "the exercise's schedule")


@check("ex06.step.no_recompile", kind="structure", points=2, needs=("make_optimizer", "make_train_step"), public=True)
def training_no_recompile(learner, ctx) -> Measured:
    """Over the schedule, with a new learning rate every step, the compiled optimizer step never recompiles."""
    return expect_no_recompile(learner, ctx, 1, LR, "exercise", STEPS, "the exercise's schedule")
