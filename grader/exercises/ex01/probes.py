"""Exercise 1, worker side: build the learner's losses and train step on the judge's inputs, report results."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coursekit.explain import summarise
from coursekit.models import ToyConvNet
from coursekit.traffic import watch_traffic
from grader.probing import (
    Call,
    Failure,
    Reply,
    graph_runs,
    learner_call,
    learner_int,
    module_tensors,
    op_calls,
    plain,
    probe,
    stage_timed,
)


def build_loss(call: Call, held: set[int] | None = None) -> Callable:
    """``SmoothedCE(...)`` or ``builtin_smoothed_ce(...)`` on the device, compiled with ``compile_loss`` when asked;
    ``held`` gets the data pointers of the tensors the loss module holds (``module_tensors``)."""
    factory = call.get(call.arg("factory"))
    module = factory(call.arg("weights"), smoothing=call.arg("smoothing"), ignore_index=call.arg("ignore_index"))
    if not isinstance(module, nn.Module):
        raise Failure(f"{call.arg('factory')} should give an nn.Module, got {type(module).__name__}")
    module = module.to(call.device)
    if held is not None:
        held |= module_tensors(module)
    if call.arg("compiled"):
        if call.arg("reset", True):
            torch.compiler.reset()
        compiled = call.get("compile_loss")(module, backend=call.arg("backend", "inductor"))
        if not callable(compiled):
            raise Failure(f"compile_loss should return a callable, got {type(compiled).__name__}")
        return compiled
    return module


def loss_and_grad(
    fn: Callable, logits: torch.Tensor, target: torch.Tensor, what: str, grads: bool
) -> dict[str, torch.Tensor]:
    loss = fn(logits, target)
    out = {"loss": plain(loss, f"{what}'s result")}
    if grads:
        loss.backward()
        if logits.grad is None:
            raise Failure(
                f"{what}: no gradient reached the logits (is the result detached, or built with .item()/torch.tensor?)"
            )
        out["grad"] = plain(logits.grad, f"{what}'s gradient")
    return out


@probe("ex01.loss")
def loss(call: Call) -> Reply:
    """The loss (and its gradient w.r.t. the logits) of a freshly built loss module on the judge's inputs."""
    fn = build_loss(call)
    logits = call.input("logits", grad=bool(call.arg("grads")))
    what = call.arg("label", call.arg("factory"))
    return Reply(tensors=learner_call(loss_and_grad, (fn, logits, call.input("target"), what, call.arg("grads")), what))


@probe("ex01.loss_module")
def loss_module(call: Call) -> Reply:
    """The class of the module a loss factory builds (``builtin_smoothed_ce`` must give PyTorch's own)."""
    kind = type(build_loss(call.but(compiled=False)))
    return Reply({"class": f"{kind.__module__}.{kind.__qualname__}"[:200], "builtin": kind is nn.CrossEntropyLoss})


def hidden_costs() -> Callable[[torch.Tensor, int, int], torch.Tensor]:
    """A fresh copy of the grader's function with costs it can count: ``reads`` host reads (``.item()`` of
    ``x[i, 0]``) and a Python loop over ``columns`` columns (``x[:, j].exp()``) on every call, and on its first
    call only a one-off cost (a scale built lazily: one more ``select`` and ``exp``), which a warm-up call keeps
    out of the profile."""
    built: list[torch.Tensor] = []

    def costs(x: torch.Tensor, reads: int, columns: int) -> torch.Tensor:
        if not built:
            built.append(x[0, 0].exp() * 0 + 1)
        total = x.new_zeros(())
        for i in range(reads):
            total = total + x[i, 0].item()
        for j in range(columns):
            total = total + x[:, j].exp().sum()
        return total * built[0]

    return costs


def costs_input(reads: int, columns: int, seed: int) -> torch.Tensor:
    """The input ``hidden_costs`` runs on: ``[reads + 2, columns + 1]`` values from ``seed``, on the CPU."""
    return torch.randn(reads + 2, columns + 1, generator=torch.Generator().manual_seed(seed))


def _count_or_text(value: object) -> int | str:
    """A count the judge can compare, or what the learner returned instead, as text."""
    try:
        return learner_int(value, "op_counts")
    except Failure:
        try:
            return repr(value)[:40]
        except ValueError:  # an int of over 4,300 digits
            return "an int of thousands of digits"


@probe("ex01.op_counts")
def profiled_counts(call: Call) -> Reply:
    """The learner's ``op_counts`` on ``hidden_costs`` with the judge's sizes (on the CPU: ops, not kernels)."""
    reads, columns = int(call.arg("reads")), int(call.arg("columns"))
    x = costs_input(reads, columns, int(call.arg("seed")))
    got = learner_call(call.get("op_counts"), (hidden_costs(), (x, reads, columns)), "op_counts")
    if not isinstance(got, dict):
        raise Failure(f"op_counts returned {type(got).__name__}; return a dict from op name to count")
    counts = {str(k)[:80]: _count_or_text(v) for k, v in got.items()}
    return Reply({"counts": dict(list(counts.items())[:300])})


@probe("ex01.traffic")
def traffic(call: Call) -> Reply:
    """Host/device traffic of the third forward + backward of the learner's loss (two warm-up calls first). Every
    call gets new tensors, as a training loop's batches are, all kept alive so none reuses another's memory: work
    cached per input object (or address) still shows."""
    fn = build_loss(call)
    targets = [call.input("target").clone() for _ in range(3)]
    for target in targets[:2]:  # lazy initialisation is allowed on the first calls
        fn(call.input("logits", grad=True), target).backward()
    logits, target = call.input("logits", grad=True), targets[2]
    with watch_traffic(call.device) as seen:
        result = fn(logits, target)
        result.backward()
    return Reply(
        {"syncs": dict(seen.syncs), "host_tensors": dict(seen.host_tensors), "summary": seen.summary()},
        {"loss": plain(result, "SmoothedCE's result")},
    )


@probe("ex01.graphs")
def graphs(call: Call) -> Reply:
    """``torch._dynamo.explain`` on the learner's loss, then frames compiled by ``compile_loss`` over three batches
    of the same shape (with the losses they computed), and how many of those calls returned a loss that a graph
    holding the loss computed from their own inputs (``loss_calls``, ``GraphRuns.returned``: a recompile that fell
    back to eager, under a low ``recompile_limit``, say, runs none, red team, session 39; a token graph beside an
    eager loss computes none, session 47)."""
    module = build_loss(call.but(compiled=False))
    torch.compiler.reset()
    info = learner_call(
        lambda: torch._dynamo.explain(module)(call.input("logits0"), call.input("target0")),
        (),
        "torch._dynamo.explain(SmoothedCE)",
    )
    seen = summarise(info)  # reasons with the learner's cell and line; a loss Dynamo skipped whole says so
    torch.compiler.reset()
    counter, held = graph_runs("inductor", detail=False), set()
    compiled = build_loss(call.but(compiled=True, backend=counter, reset=False), held)
    losses, loss_calls = [], 0
    for i in range(3):
        args = (call.input(f"logits{i}", grad=True), call.input(f"target{i}"))
        counter.last = None
        result = learner_call(compiled, args, "the compiled loss")
        loss_calls += counter.returned(result, holds_loss, held | {a.data_ptr() for a in args})
        result.backward()
        losses.append(plain(result, "the compiled loss's result"))
    return Reply(
        {
            "graph_count": seen["graphs"],
            "break_count": seen["breaks"],
            "reasons": seen["reasons"][:3],
            "frames": counter.frame_count,
            "loss_calls": loss_calls,
        },
        {"losses": torch.stack(losses)},
    )


LOSS_OPS = ("log_softmax", "logsumexp", "softmax", "log", "exp", "cross_entropy", "nll_loss")


def holds_loss(graph: torch.fx.GraphModule) -> int:
    """1 for a graph that holds an operator of a cross-entropy (``LOSS_OPS``), else 0."""
    return int(op_calls(graph, LOSS_OPS) > 0)


@probe("ex01.timed_loss")
def timed_loss(call: Call) -> Reply:
    """Stage forward + backward of the learner's loss (compiled when asked) for ``timing.run``. Compiled, it runs
    once on the judge's inputs through a counting backend and reports what its graphs hold: the operators that
    make a cross-entropy (none where the loss ran eagerly)."""
    counter, held = (graph_runs("inductor", detail=False), set()) if call.arg("compiled") else (None, None)
    fn = build_loss(call.but(backend=counter) if counter else call, held)
    made = [0]  # calls whose loss a graph holding the loss computed from their own inputs (``returned``)

    def fwd_bwd(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if counter is not None:
            counter.last = None
        out = fn(logits, target)
        if counter is not None:
            made[0] += counter.returned(out, holds_loss, held | {logits.data_ptr(), target.data_ptr()})
        out.backward()
        return out

    if counter is None:
        return stage_timed(call, call.arg("handle"), fwd_bwd)
    # every timed call's loss must come from a graph that holds the loss, run on that call's inputs (a graph compiled
    # for the staging call only shows; so does a token graph beside an eager loss, red team, session 47)
    reply = stage_timed(call, call.arg("handle"), fwd_bwd, work=lambda: made[0])
    learner_call(fwd_bwd, (call.input("logits", grad=True), call.input("target")), "the compiled loss")
    loss_ops = sum(op_calls(g, LOSS_OPS) for g in counter.graphs)
    return Reply({**reply.values, "frames": counter.frame_count, "loss_ops": loss_ops})


def _tiny_training(call: Call) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = ToyConvNet(image_size=16, num_classes=10)
    model.load_state_dict({k.removeprefix("model."): v for k, v in call.inputs.items() if k.startswith("model.")})
    model = model.to(call.device)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def _loss_fn(call: Call) -> nn.Module:
    """The step's loss: cross-entropy, with the judge's class weights when it sends them (a weighted mean is not
    the mean of its micro-batches' means, so only accumulating over the micro-batches gives the judge's update)."""
    if "class_weights" not in call.inputs:
        return nn.CrossEntropyLoss()
    return nn.CrossEntropyLoss(weight=call.input("class_weights"))


def _step_inputs(call: Call, i: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """Step ``i``'s loss, images and labels, on the device: made before a watched step, so the judge's own
    host-to-device copies are not counted as the learner's (on the H200 run they were: two pageable copies)."""
    return _loss_fn(call), call.input(f"images{i}"), call.input(f"labels{i}")


def _raw_step(call: Call, model, optimizer, inputs: tuple[nn.Module, torch.Tensor, torch.Tensor]):
    loss_fn, images, labels = inputs
    return learner_call(
        lambda: call.get("train_step")(
            model,
            loss_fn,
            optimizer,
            images,
            labels,
            micro_batches=int(call.arg("micro_batches")),
            max_norm=float(call.arg("max_norm")),
        ),
        (),
        "train_step",
    )


def _checked(got) -> torch.Tensor:
    if isinstance(got, (float, int)):
        raise Failure(
            "train_step returned a Python number: `.item()` makes the host wait for the device every step. "
            "Return `loss.detach()` and read it only when you log."
        )
    loss = plain(got, "train_step's result")
    if got.requires_grad:
        raise Failure("train_step returned a loss that still holds the autograd graph: return a detached tensor")
    return loss


@probe("ex01.train")
def train(call: Call) -> Reply:
    """The learner's train_step over the judge's batches, from the judge's weights: losses and final weights."""
    model, optimizer = _tiny_training(call)
    steps = range(int(call.arg("steps")))
    losses = [_checked(_raw_step(call, model, optimizer, _step_inputs(call, i))) for i in steps]
    return Reply(
        tensors={"losses": torch.stack(losses), **{f"param.{n}": p.detach().cpu() for n, p in model.named_parameters()}}
    )


@probe("ex01.train_sync")
def train_sync(call: Call) -> Reply:
    """Syncs in the learner's second train_step (the first is a warm-up)."""
    model, optimizer = _tiny_training(call)
    _checked(_raw_step(call, model, optimizer, _step_inputs(call, 0)))
    watched = _step_inputs(call, 1)
    with watch_traffic(call.device) as seen:
        got = _raw_step(call, model, optimizer, watched)
    return Reply({"syncs": dict(seen.syncs), "summary": seen.summary()}, {"loss": _checked(got)})
