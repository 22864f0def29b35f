"""Exercise 6, worker side: the learner's regional compilation, optimizer and compiled training loop on the given
ViT, with the judge's seeds; and a cold capture the judge times.

Compiles here use the cheap backends ``aot_eager`` and ``eager`` wrapped in a counter: what is checked (how many
graphs, which code they hold, whether a new learning rate recompiles, the values) is decided before Inductor
runs, and it keeps every check to seconds on a CPU.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, StepLR

from coursekit.lessons.compile_time.givens import (
    DEPTH,
    STAGES,
    Block,
    MixerBlock,
    loss_fn,
    make_batch,
    make_hybrid,
    make_model,
    make_scheduler,
)
from grader.probing import Call, Failure, Reply, foreign_calls, graph_runs, learner_call, linear_calls, plain, probe

LINEARS_PER_BLOCK = 4  # a ViT block: qkv, proj, fc1, fc2; a Mixer block: two in each of its two MLPs
MOMENTS = ("exp_avg", "exp_avg_sq")  # AdamW's running averages of each parameter, in optimizer.state[p]
STEP_DEPTH = 2  # the training-loop checks use a shallow model: compiling AdamW's step costs time per parameter
REGIONAL_HINT = (
    "Compile every submodule that is an instance of one of block_types in place, with "
    "module.compile(backend=backend), wherever it sits in the model, and return the model: the blocks of one "
    "kind share one compiled graph, and the rest of the model stays eager."
)
STEP_HINT = (
    "step(images, labels) computes the cross-entropy of model(images), calls backward, runs the compiled "
    "optimizer.step() and scheduler.step(), clears the gradients, and returns loss.detach()."
)
# torch's AdamW update functions, whichever this torch has: AdamW subclasses Adam and calls ``adam()``'s in newer
# releases (2.7 on), and had its own ``_single_tensor_adamw`` and the like before; both dispatch through module globals
ADAM_UPDATES = {
    "torch.optim.adam": ("_single_tensor_adam", "_multi_tensor_adam", "_fused_adam"),
    "torch.optim.adamw": ("_single_tensor_adamw", "_multi_tensor_adamw", "_fused_adamw"),
}
SCHEDULES = {
    "exercise": make_scheduler,
    "CosineAnnealingLR": partial(CosineAnnealingLR, T_max=6),
    "LinearLR": partial(LinearLR, start_factor=0.25, total_iters=4),
    "StepLR": partial(StepLR, step_size=2, gamma=0.5),
}


def compiled_linears(count) -> int:
    """Linear-layer calls so far inside compiled graphs: each graph's runs times the linear layers it holds (a
    forward of a model whose blocks all run compiled makes ``blocks * LINEARS_PER_BLOCK`` of them)."""
    return sum(r * linear_calls(g) for g, r in zip(count.graphs, count.runs))


def compiled_blocks(count, model: nn.Module, block_types: tuple[type, ...]) -> int:
    """The blocks of ``model`` whose linear layers' weights a compiled graph of a whole block (``LINEARS_PER_BLOCK``
    linear layers), compiled for training, has read: a block that ran eagerly, whatever else it called, is not one,
    nor one compiled under ``no_grad`` (or inside an ``autograd.Function``'s forward) with its backward left to run
    eagerly, which traces half the work (red team, session 35: a whole body compiled that way passed the timed cold
    capture at 1.8x-2.4x, against the whole model's 1.1x)."""
    read = [
        t
        for g, r, t, training in zip(count.graphs, count.runs, count.touched, count.training)
        if r and training and linear_calls(g) >= LINEARS_PER_BLOCK
    ]
    found = 0
    for block in (m for m in model.modules() if isinstance(m, block_types)):
        weights = {m.weight.data_ptr() for m in block.modules() if isinstance(m, nn.Linear)}
        found += any(weights <= t for t in read)
    return found


def grad_sums(model: nn.Module) -> torch.Tensor:
    """Each parameter's summed absolute gradient, in ``model.parameters()`` order (nan for one that got none): what
    the judge compares after a timed capture, where sending every gradient would cost more than the step."""
    nan = float("nan")
    sums = [p.grad.detach().abs().sum() if p.grad is not None else p.new_full((), nan) for p in model.parameters()]
    return torch.stack(sums).float().cpu()


def holds_update(graph: torch.fx.GraphModule) -> bool:
    """Whether a compiled graph holds AdamW's update (its addcdiv/addcmul) and calls nothing but torch's own
    operations (``grader.probing.foreign_calls``): an update hidden in a custom op is not compiled there."""
    return "addc" in graph.code and not foreign_calls(graph)


def updated_compiled(count, tensors: list[torch.Tensor], runs_before: list[int]) -> bool:
    """Whether the graphs that hold AdamW's update (``holds_update``) and ran since ``runs_before`` read every one
    of ``tensors`` (the model's parameters and AdamW's running averages) between them: a compiled update of
    something else is not the optimizer's, and an update split across graphs (a break between parameter groups)
    still counts."""
    wanted = {t.data_ptr() for t in tensors}
    ran = [i for i, r in enumerate(count.runs) if r > (runs_before[i] if i < len(runs_before) else 0)]
    read = set().union(*(count.touched[i] for i in ran if holds_update(count.graphs[i])))
    return wanted <= read


def running_averages(opt: Any, model: nn.Module) -> list[torch.Tensor] | None:
    """AdamW's running averages of every parameter of ``model`` (``optimizer.state[p]``'s ``MOMENTS``), in order;
    None where one is missing. A compiled ``optimizer.step()`` builds them at its first call and then updates them
    in place, inside its graph, at every step."""
    state = getattr(opt, "state", None)
    found = []
    for p in model.parameters():
        entry = state.get(p) if isinstance(state, dict) else None
        for key in MOMENTS:
            value = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(value, torch.Tensor) or value.shape != p.shape:
                return None
            found.append(value)
    return found


class AveragesMoved:
    """Whether AdamW's running averages were updated in a step: the same tensors as after the first step (updated
    in place, as a compiled step does, not replaced) whose values changed since the last look (red team hole open
    since session 37: AdamW computed by hand into copies, eagerly, and copied into the parameters by a compiled
    graph, met every rule on the parameters alone)."""

    def __init__(self) -> None:
        self.first: list[int] | None = None
        self.seen: list[torch.Tensor] = []

    def step(self, averages: list[torch.Tensor] | None) -> bool:
        """Look after a step; True when every average is the first step's tensor and they changed since the last look
        (some of them: the averages of a weight whose gradient is exactly zero, such as attention's key bias can get,
        stay zero)."""
        if averages is None:
            return False
        ptrs = [t.data_ptr() for t in averages]
        now = [t.detach().clone() for t in averages]
        if self.first is None:
            self.first, moved = ptrs, True
        else:
            moved = ptrs == self.first and any(not torch.equal(a, b) for a, b in zip(now, self.seen))
        self.seen = now
        return moved


@contextmanager
def eager_adam_updates() -> Iterator[list[str]]:
    """While it is open, every call of torch's AdamW update functions (``ADAM_UPDATES``) made while not compiling:
    the names called, in order. A compiled ``optimizer.step()`` traces through the stand-ins (Dynamo inlines them,
    ``is_compiling()`` is true there, and nothing is recorded); one called eagerly, or run eagerly because Dynamo
    skipped its frame, records itself (red team, session 37: ``optimizer.step()`` run eagerly beside a compiled
    out-of-place ``addcmul`` of every parameter had passed both recompile checks with float rates). The originals
    are put back on leaving."""
    calls: list[str] = []
    saved: list[tuple[Any, str, Callable]] = []

    def stand_in(name: str, original: Callable) -> Callable:
        def update(*args: Any, **kwargs: Any) -> Any:
            if not torch.compiler.is_compiling():
                calls.append(name)
            return original(*args, **kwargs)

        return update

    try:
        for module_name, names in ADAM_UPDATES.items():
            module = importlib.import_module(module_name)
            for name in names:
                original = module.__dict__.get(name)
                if callable(original):
                    saved.append((module, name, original))
                    setattr(module, name, stand_in(name, original))
        yield calls
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)


ADAM_STATE = (*MOMENTS, "step", "max_exp_avg_sq")  # what AdamW keeps in optimizer.state[p]


def update_inputs(opt: Any) -> set[int]:
    """The data pointers of what AdamW's update may read, as it runs: each parameter and its gradient, AdamW's own
    state of each (``ADAM_STATE``) and the tensors among the param groups' settings (a tensor learning rate)."""
    ptrs: set[int] = set()
    state = getattr(opt, "state", {})
    for group in getattr(opt, "param_groups", []):
        for key, value in group.items():
            values = value if isinstance(value, (list, tuple)) else (value,)
            for v in values:
                if isinstance(v, torch.Tensor):
                    ptrs.add(v.data_ptr())
                    grad = v.grad if key == "params" else None
                    if isinstance(grad, torch.Tensor):
                        ptrs.add(grad.data_ptr())
                    entry = state.get(v, {}) if key == "params" and isinstance(state, dict) else {}
                    ptrs.update(entry[k].data_ptr() for k in ADAM_STATE if isinstance(entry.get(k), torch.Tensor))
    return ptrs


@contextmanager
def backward_seen(backend: OutsideWrites, params: list[torch.Tensor]) -> Iterator[None]:
    """While it is open, every ``torch.autograd.backward`` (``loss.backward()`` calls it) hands ``backend`` the
    parameters' gradients when it returns. Kept from Dynamo (``torch._dynamo.disable``), where ``loss.backward()``
    breaks the graph anyway; hooks on the parameters or the model's output would change what Dynamo compiles."""
    original = torch.autograd.backward

    @torch._dynamo.disable
    def backward(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        backend.keep_grads(params)
        return out

    torch.autograd.backward = backward
    try:
        yield
    finally:
        torch.autograd.backward = original


class OutsideWrites:
    """A backend that runs ``backend`` and counts, in ``.outside``, the times the watched tensors (``watch``: a
    model's parameters, then AdamW's running averages too) were found changed outside a compiled graph: looked at
    before and after every graph run, and when ``settle`` is called (at the end of each step). An optimizer update
    run eagerly, ``torch.optim``'s or written by hand, changes them between graph runs, whatever a compiled graph
    beside it computes."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.watched: list[torch.Tensor] = []
        self.seen: list[torch.Tensor] = []
        self.outside = 0
        self.optimizer: Any = None  # set: each run of a graph holding the update must read only update_inputs
        self.foreign_reads = 0
        self.backward_grads: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(param): (param, its grad then)
        self.grads_changed = 0

    def keep_grads(self, params: list[torch.Tensor]) -> None:
        """Keep each parameter's gradient as backward left it (``backward_seen`` calls this), for the update graphs to
        be handed those and nothing else (red team, session 48: AdamW by hand, eagerly, its new parameters written
        into the gradients, which the compiled graph copied into the parameters)."""
        self.backward_grads = {id(p): (p, p.grad.detach().clone()) for p in params if isinstance(p.grad, torch.Tensor)}

    def watch(self, tensors: list[torch.Tensor]) -> None:
        self.watched = list(tensors)
        self.seen = self.values()

    def values(self) -> list[torch.Tensor]:
        return [t.detach().clone() for t in self.watched]

    def settle(self) -> None:
        """Count a change made since the last look, then look again."""
        now = self.values()
        if any(not torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True) for a, b in zip(now, self.seen)):
            self.outside += 1
        self.seen = now

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        compiled = self.backend(gm, example_inputs)
        update = holds_update(gm)

        def run(*args: Any) -> Any:
            self.settle()
            if update and self.optimizer is not None:
                read = {a.data_ptr() for a in (*args, *gm.parameters(), *gm.buffers()) if isinstance(a, torch.Tensor)}
                self.foreign_reads += bool(read - update_inputs(self.optimizer))
                self.grads_changed += not self.backward_grads or any(
                    isinstance(p.grad, torch.Tensor) and not torch.equal(p.grad, then)
                    for p, then in self.backward_grads.values()
                )
            try:
                return compiled(*args)
            finally:
                self.seen = self.values()

        return run


def build(spec: dict, seed: int, device: str) -> tuple[nn.Module, tuple[type, ...]]:
    """The model a check names and its block types: ``{"model": "hybrid", "stages": ..., "dim": ..., "heads":
    ...}`` (MLP-Mixer and ViT blocks) or ``{"model": "vit", "depth": ..., ...}`` (ViT blocks only)."""
    sizes = {k: spec[k] for k in ("dim", "heads") if k in spec}
    if spec.get("model") == "hybrid":
        return make_hybrid(seed, device, stages=spec.get("stages") or STAGES, **sizes), (MixerBlock, Block)
    return make_model(seed, device, depth=spec.get("depth", DEPTH), **sizes), (Block,)


def regional(call: Call, seed: int, backend: Any, spec: dict) -> tuple[nn.Module, nn.Module, list[str]]:
    torch.compiler.reset()
    model, block_types = build(spec, seed, call.device)
    keys = list(model.state_dict())
    got = learner_call(call.get("compile_blocks"), (model, block_types, backend), "compile_blocks", REGIONAL_HINT)
    if not isinstance(got, nn.Module):
        raise Failure(f"compile_blocks returned {type(got).__name__}; return the model. " + REGIONAL_HINT)
    return got, model, keys


def forward_backward(
    model: nn.Module, params: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], what: str
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of ``model`` on ``batch`` and the gradients it leaves on ``params``' parameters."""
    params.zero_grad(set_to_none=True)
    loss = learner_call(lambda: loss_fn()(model(batch[0]), batch[1]), (), what, REGIONAL_HINT)
    out = plain(loss, what)
    loss.backward()
    return out, {n: p.grad.detach().cpu() for n, p in params.named_parameters() if p.grad is not None}


@probe("ex06.regional")
def regional_values(call: Call) -> Reply:
    """``compile_blocks`` with ``aot_eager``: the state_dict keys before and after, and the loss and gradients of one
    step on the judge's batch seed."""
    seed, spec = int(call.arg("seed")), call.arg("model") or {}
    got, model, keys = regional(call, seed, "aot_eager", spec)
    loss, grads = forward_backward(got, model, make_batch(seed + 100, call.device), "the model after compile_blocks")
    return Reply(
        {"keys_before": keys, "keys_after": list(got.state_dict())},
        {"loss": loss, **{f"grad.{n}": g for n, g in grads.items()}},
    )


@probe("ex06.regional_graphs")
def regional_graphs(call: Call) -> Reply:
    """``compile_blocks`` with a counting backend over two steps: frames after each, and linears per graph."""
    seed, spec = int(call.arg("seed")), call.arg("model") or {}
    count = graph_runs("aot_eager")
    got, model, _ = regional(call, seed, count, spec)
    first, _ = forward_backward(got, model, make_batch(seed, call.device), "the model after compile_blocks")
    frames_first, linears_first = count.frame_count, compiled_linears(count)
    second, _ = forward_backward(got, model, make_batch(seed + 1, call.device), "the model after compile_blocks")
    return Reply(
        {
            "compiled_linears": [linears_first, compiled_linears(count) - linears_first],
            "compiled_blocks": compiled_blocks(count, model, (MixerBlock, Block)),
            "frames_first": frames_first,
            "frames_second": count.frame_count,
            "linears": [linear_calls(g) for g in count.graphs],
        },
        {"losses": torch.stack([first, second])},
    )


@probe("ex06.optimizer")
def optimizer(call: Call) -> Reply:
    """``make_optimizer(model, lr)`` for each of the judge's learning rates: what it built; and the weights after
    one step of the first, with the judge's gradients."""
    model = make_model(0, call.device, depth=STEP_DEPTH)
    found, stepped = [], {}
    for lr in call.arg("lrs"):
        opt = learner_call(call.get("make_optimizer"), (model, lr), "make_optimizer")
        groups = list(getattr(opt, "param_groups", []))
        params = [p for g in groups for p in g["params"]]
        head = {id(p) for p in model.head.parameters()}
        body = {id(p) for p in model.parameters()} - head
        found.append(
            {
                "type": type(opt).__name__,
                "adamw": isinstance(opt, torch.optim.AdamW),
                "every_param_once": {id(p) for p in params} == {id(p) for p in model.parameters()}
                and len(params) == len(list(model.parameters())),
                "groups": [describe_group(g, head, body) for g in groups],
            }
        )
        if not stepped:  # one step with the judge's gradients, on a fresh copy of the model
            fresh = make_model(0, call.device, depth=STEP_DEPTH)
            opt = learner_call(call.get("make_optimizer"), (fresh, lr), "make_optimizer")
            for name, p in fresh.named_parameters():
                p.grad = call.input(f"grad.{name}")
            learner_call(opt.step, (), "the optimizer's step()")
            stepped = {f"w.{n}": p.detach().cpu() for n, p in fresh.named_parameters()}
    return Reply({"optimizers": found}, stepped)


def describe_group(group: dict, head: set[int], body: set[int]) -> dict:
    """What one parameter group holds (``head``, ``body`` or ``other``), its rate and its weight decay."""
    ids = {id(p) for p in group["params"]}
    rate, decay = group.get("lr"), group.get("weight_decay")
    return {
        "holds": "head" if ids == head else "body" if ids == body else "other",
        "lr_type": type(rate).__name__,
        "lr_is_tensor": isinstance(rate, torch.Tensor),
        "lr": float(rate) if isinstance(rate, (float, int, torch.Tensor)) else None,
        "weight_decay": float(decay) if isinstance(decay, (int, float)) else None,
    }


def learner_run(
    call: Call, backend: Any, on_step=None, on_model=None, on_optimizer=None
) -> tuple[list[torch.Tensor], list[float], nn.Module]:
    """The learner's loop: ``make_optimizer``, the judge's schedule and ``make_train_step`` with ``backend``;
    ``on_model(model)`` before any of them, ``on_optimizer(optimizer)`` once it is made, ``on_step(i, model,
    optimizer)`` after each step."""
    torch.compiler.reset()
    seed, lr, steps = int(call.arg("seed")), float(call.arg("lr")), int(call.arg("steps"))
    model = make_model(seed, call.device, depth=STEP_DEPTH)
    if on_model is not None:
        on_model(model)
    opt = learner_call(call.get("make_optimizer"), (model, lr), "make_optimizer")
    if on_optimizer is not None:
        on_optimizer(opt)
    sched = SCHEDULES[call.arg("schedule")](opt)
    step = learner_call(call.get("make_train_step"), (model, opt, sched, backend), "make_train_step", STEP_HINT)
    if not callable(step):
        raise Failure("make_train_step must return a function step(images, labels) -> loss. " + STEP_HINT)
    losses, lrs = [], []
    for i in range(steps):
        images, labels = make_batch(seed * 1000 + i, call.device)
        loss = learner_call(step, (images, labels), f"step {i + 1} of your training loop", STEP_HINT)
        value = plain(loss, "step's result")
        if loss.requires_grad:
            raise Failure("step returned a loss that still requires grad: return loss.detach(). " + STEP_HINT)
        losses.append(value)
        lrs.append([float(g["lr"]) for g in opt.param_groups])
        if on_step is not None:
            on_step(i, model, opt)
    return losses, lrs, model


@probe("ex06.train")
def train(call: Call) -> Reply:
    """The learner's compiled loop (``aot_eager``): losses, learning rates and final weights."""
    losses, lrs, model = learner_run(call, "aot_eager")
    return Reply(
        {"lrs": lrs},
        {"losses": torch.stack(losses), **{f"w.{k}": v.detach().cpu() for k, v in model.state_dict().items()}},
    )


@probe("ex06.train_frames")
def train_frames(call: Call) -> Reply:
    """The learner's loop with a counting ``eager`` backend: frames after each step, whether AdamW's update (its
    addcdiv/addcmul) is in a compiled graph, how often such a graph ran by the end of each step, and in each step
    the calls of torch's AdamW update functions made eagerly, the changes to the parameters and AdamW's running
    averages found outside compiled graphs, and whether those averages were updated in place."""
    count = graph_runs("eager")
    backend = OutsideWrites(count)
    frames: list[int] = []
    updates: list[int] = []
    runs_before: list[int] = []
    eager_updates: list[int] = []
    eager_writes: list[int] = []
    averages_moved: list[int] = []
    foreign_reads: list[int] = []
    grads_changed: list[int] = []
    moved = AveragesMoved()

    with eager_adam_updates() as eager_calls, ExitStack() as seen:

        def after_step(i: int, model: nn.Module, opt: Any) -> None:
            frames.append(count.frame_count)
            params, averages = list(model.parameters()), running_averages(opt, model)
            updates.append(int(updated_compiled(count, params + (averages or []), runs_before)))
            averages_moved.append(int(moved.step(averages)))
            runs_before[:] = count.runs
            backend.settle()
            backend.watch(params + (averages or []))  # from the next step on, the averages too
            eager_updates.append(len(eager_calls) - sum(eager_updates))
            eager_writes.append(backend.outside - sum(eager_writes))
            foreign_reads.append(backend.foreign_reads - sum(foreign_reads))
            grads_changed.append(backend.grads_changed - sum(grads_changed))
            backend.backward_grads = {}  # each step's update must follow a backward of its own

        def on_model(model: nn.Module) -> None:
            backend.watch(list(model.parameters()))
            seen.enter_context(backward_seen(backend, list(model.parameters())))

        def on_optimizer(opt: Any) -> None:
            backend.optimizer = opt

        losses, _, _ = learner_run(call, backend, on_step=after_step, on_model=on_model, on_optimizer=on_optimizer)
    return Reply(
        {
            "frames": frames,
            "adam_in_graph": any(holds_update(g) for g in count.graphs),
            "foreign": sorted({name for g in count.graphs for name in foreign_calls(g)})[:5],
            "compiled_updates": updates,
            "eager_updates": eager_updates,
            "eager_writes": eager_writes,
            "averages_moved": averages_moved,
            "foreign_reads": foreign_reads,
            "grads_changed": grads_changed,
        },
        {"losses": torch.stack(losses)},
    )


@probe("ex06.cold_capture")
def cold_capture(call: Call) -> Reply:
    """From a fresh compile state: ``compile_blocks`` on a new ViT with a counting ``aot_eager`` backend, then one
    forward and backward. The judge times this request on its own clock."""
    torch.compiler.reset()
    seed = int(call.arg("seed"))
    model = make_model(seed, call.device)
    images, labels = make_batch(seed, call.device)
    count = graph_runs("aot_eager")
    compiled = learner_call(call.get("compile_blocks"), (model, (Block,), count), "compile_blocks", REGIONAL_HINT)
    loss = loss_fn()(compiled(images), labels)
    loss.backward()
    sums = grad_sums(model)
    if torch.device(call.device).type == "cuda":
        torch.cuda.synchronize()
    return Reply(
        {
            "frames": count.frame_count,
            "linears": [linear_calls(g) for g in count.graphs],
            "compiled_linears": [compiled_linears(count)],
            "compiled_blocks": compiled_blocks(count, model, (Block,)),
        },
        {"loss": plain(loss, "the loss"), "grad_sums": sums},
    )
