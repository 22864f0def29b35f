"""Exercise 2, worker side: the learner's custom op and FixedScorer on the judge's weights and inputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from coursekit.explain import summarise
from coursekit.lessons.graph_breaks.givens import CALIBRATION_X, CALIBRATION_Y, BrokenScorer
from coursekit.traffic import watch_traffic
from grader.probing import (
    Call,
    Failure,
    Reply,
    compiled_work,
    graph_runs,
    learner_call,
    linear_calls,
    module_tensors,
    named_tensors,
    ordinal,
    plain,
    probe,
    stage_timed,
    torch_own,
)

FAKE_HINT = "Register a fake implementation with @calibrate.register_fake that returns torch.empty_like(top)."
ALIAS_HINT = (
    "Return a new tensor from calibrate, never top itself or a view of it: a custom op's output may not alias its "
    "inputs."
)


@probe("ex02.calibrate")
def custom_op(call: Call) -> Reply:
    """The learner's op on the judge's ``top``, and what ``torch.library.opcheck`` says of it."""
    from torch._library.custom_ops import CustomOpDef

    op = call.get("calibrate")
    if not isinstance(op, CustomOpDef):
        raise Failure(
            "calibrate must be defined with @torch.library.custom_op('ex02::calibrate', "
            f"mutates_args=()); got {type(op).__name__}"
        )
    top = call.input("top")
    got = learner_call(op, (top,), "calibrate(top)")
    out = plain(got, "calibrate(top)")
    report = torch.library.opcheck(op, (top,), raise_exception=False)
    failed = {k: str(v).splitlines()[0][:300] for k, v in report.items() if v != "SUCCESS"}
    return Reply({"device": str(got.device), "dtype": str(got.dtype), "opcheck_failed": failed}, {"out": out})


def fixed_scorer(call: Call) -> nn.Module:
    """The learner's FixedScorer with the judge's weights, on the device."""
    factory = call.get("FixedScorer")
    if not (isinstance(factory, type) and issubclass(factory, BrokenScorer)):
        raise Failure("FixedScorer must be a subclass of BrokenScorer (class FixedScorer(BrokenScorer))")
    model = factory()
    weights = {k.removeprefix("w."): v for k, v in call.inputs.items() if k.startswith("w.")}
    missing, _ = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k in weights]
    if missing:
        raise Failure(
            f"FixedScorer lacks BrokenScorer's parameters {missing}: subclass BrokenScorer and call "
            "super().__init__(*args, **kwargs)"
        )
    return model.to(call.device)


def outputs_and_grads(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Output, gradient w.r.t. the input, and parameter gradients of ``model(x).square().sum()``."""
    x = x.detach().clone().requires_grad_()
    model.zero_grad(set_to_none=True)
    out = model(x)
    plain(out, "FixedScorer's output")
    out.square().sum().backward()
    grads = {f"dp.{n}": p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return {"out": out.detach().cpu(), "dx": x.grad.detach().cpu() if x.grad is not None else torch.zeros(0), **grads}


@probe("ex02.scorer")
def scorer(call: Call) -> Reply:
    """FixedScorer's outputs (and gradients) on each of the judge's batches (with ``calibrate`` replaced by its
    pure-torch twin when asked, as the traffic probe does)."""
    if call.arg("twin"):
        learner_op = call.get("calibrate")
        call.namespace["calibrate"] = torch_calibrate(call.device)
        try:
            return scorer(call.but(twin=False))
        finally:
            call.namespace["calibrate"] = learner_op
    model = fixed_scorer(call)
    tensors = {}
    for i in range(int(call.arg("batches"))):
        x = call.input(f"x{i}")
        if call.arg("grads"):
            got = learner_call(outputs_and_grads, (model, x), "FixedScorer (forward and backward)")
            tensors |= {f"{k}{i}" if k in ("out", "dx") else f"{i}.{k}": v for k, v in got.items()}
        else:
            with torch.no_grad():
                tensors[f"out{i}"] = plain(learner_call(model, (x,), "FixedScorer"), "FixedScorer's output")
    return Reply(tensors=tensors)


@probe("ex02.statistic")
def statistic(call: Call) -> Reply:
    """FixedScorer's ``mean_activation`` buffer after each of the judge's batches."""
    model = fixed_scorer(call)
    if not isinstance(getattr(model, "mean_activation", None), torch.Tensor) or "mean_activation" not in dict(
        model.named_buffers()
    ):
        raise Failure("FixedScorer needs a buffer: self.register_buffer('mean_activation', torch.zeros(()))")
    stats = []
    for i in range(int(call.arg("batches"))):
        learner_call(model, (call.input(f"x{i}"),), "FixedScorer")
        stats.append(plain(model.mean_activation, "mean_activation").reshape(-1)[:1].clone())
    return Reply(tensors={"stats": torch.cat(stats)})


def own_numbers(value: Any, rows: int) -> bool:
    """Whether a graph's value is a tensor of one number per row that holds nothing else: not a view into a bigger
    tensor, whose storage a custom op could read whole (red team, session 48: ``calibrate(x[:, 0])`` read the rows
    back with ``as_strided``)."""
    return (
        isinstance(value, torch.Tensor)
        and value.numel() == rows
        and value.untyped_storage().nbytes() <= value.numel() * value.element_size()
    )


def outside_torch(graphs: list[torch.fx.GraphModule], op: object, rows: int) -> list[str]:
    """What the compiled graphs of FixedScorer run besides torch's own operators (``grader.probing.torch_own``) and
    one call a graph of the learner's ``calibrate`` on one number per row (its only tensor, in its arguments and
    keywords, holding nothing else: ``own_numbers``), returning one: each, named for a message.
    A custom op runs code the graph does not show, and the taught fix hands it only the top scores. Red team,
    session 47: the unfixed forward run whole inside a custom op (a second one for its backward), beside the fixed
    encoder's output, took ``no_breaks`` and ``compiles_once``; the same forward inside ``calibrate`` itself, handed
    the rows, did too (session 48)."""
    own = getattr(op, "_opoverload", None)
    found = []
    for graph in graphs:
        calls = 0
        for node in graph.graph.nodes:
            if node.op != "call_module" and (node.op != "call_function" or torch_own(node.target)):
                continue
            if own is None or node.target is not own:
                name = node.target if isinstance(node.target, str) else getattr(node.target, "__qualname__", None)
                found.append(str(name or node.target)[:80])
                continue
            calls += 1
            leaves = torch.utils._pytree.tree_leaves((node.args, node.kwargs))
            values = [a.meta.get("example_value") for a in leaves if isinstance(a, torch.fx.Node)]
            values.append(node.meta.get("example_value"))
            shapes = [
                (f"{tuple(v.shape)}, a view of a bigger tensor" if not own_numbers(v, v.numel()) else tuple(v.shape))
                if isinstance(v, torch.Tensor)
                else type(v).__name__
                for v in values
            ]
            per_row = len(values) == 2 and all(own_numbers(v, rows) for v in values)
            if calls > 1 or not per_row:
                found.append(
                    f"calibrate a {ordinal(calls)} time"
                    if calls > 1
                    else f"calibrate on {' and '.join(map(str, shapes[:-1])) or 'no tensor'}, returning {shapes[-1]}"
                )
    return found[:5]


def watched_call(compiled: Any, model: nn.Module, x: torch.Tensor, what: str, strays: list[str]) -> Any:
    """``compiled(x)``, adding to ``strays`` what it changed that forward may not: any tensor the model holds but a
    one-number ``mean_activation``, or the rows it was handed. Red team, session 48: ``calibrate`` wrote the unfixed
    forward's answer into a buffer of the model, which the graph then read, outside the one number per row it
    returned."""
    tensors = named_tensors(model)
    before = {name: t.detach().clone() for name, t in tensors.items()}
    rows = x.detach().clone()
    out = learner_call(compiled, (x,), what)
    for name, t in tensors.items():
        if (name != "mean_activation" or t.numel() != 1) and not torch.equal(t.detach(), before[name]):
            strays.append(f"changes {name}")
    if not torch.equal(x.detach(), rows):
        strays.append("changes the rows it was handed")
    return out


def stray_reads(counter: Any, model: nn.Module, inputs: list[torch.Tensor]) -> list[str]:
    """The graphs' reads of tensors that are neither the rows they were handed nor the model's own (a global of
    the learner's, which a custom op could fill), as a message part."""
    allowed = module_tensors(model) | {x.data_ptr() for x in inputs}
    extra = set().union(*counter.touched) - allowed if counter.touched else set()
    return [f"reads {len(extra)} tensor(s) that are neither the rows nor the model's own"] if extra else []


@probe("ex02.explain")
def explain(call: Call) -> Reply:
    """FixedScorer compiled with a counting backend and called on two batches of one shape: the linear layers each
    graph compiled holds, the graph breaks Dynamo counted, and the compiled outputs, which the judge compares with
    the same code's eager outputs, so the graphs counted are the ones that computed them. (Red team, session 40: a
    forward that was break-free only the first time Dynamo traced it passed under ``torch._dynamo.explain``, whose
    output the probe threw away; and a whole forward inside a ``torch.compiler.disable`` helper counts no break
    there.) Where it breaks, ``torch._dynamo.explain`` supplies the reasons, with the learner's cell and line."""
    from torch._dynamo.utils import counters

    model = fixed_scorer(call)
    torch.compiler.reset()
    counters["graph_break"].clear()
    count = graph_runs("eager")
    compiled = torch.compile(model, backend=count)
    outs, strays, xs = {}, [], [call.input(f"x{i}") for i in range(2)]
    for i, x in enumerate(xs):
        out = watched_call(compiled, model, x, "torch.compile(FixedScorer)", strays)
        outs[f"out{i}"] = plain(out, "the compiled FixedScorer's output")
    strays += stray_reads(count, model, xs)
    breaks = sum(counters["graph_break"].values())
    linears = [linear_calls(g) for g in count.graphs]
    reasons = [str(r).strip().splitlines()[0][:200] for r in list(counters["graph_break"])[:4]]
    outside = outside_torch(count.graphs, call.get("calibrate"), call.input("x0").shape[0])
    if breaks or len(linears) != 1:
        torch.compiler.reset()
        try:
            info = torch._dynamo.explain(model)(call.input("x0"))
            reasons = summarise(info)["reasons"][:4] or reasons  # the learner's cell and line, or a skipped forward
        except Exception:  # noqa: BLE001 - the reasons are for the message only: keep Dynamo's own
            pass
    values = {"linears": linears, "break_count": breaks, "reasons": reasons, "outside": outside}
    return Reply({**values, "strays": sorted(set(strays))[:5]}, outs)


@probe("ex02.compiles")
def compiles(call: Call) -> Reply:
    """Frames ``torch.compile(fullgraph=True)`` compiles for three batches of one shape, forward and backward (each
    call counted, so one run under a stance the learner's code set shows: ``grader.stance``)."""
    model = fixed_scorer(call)
    torch.compiler.reset()
    counter = graph_runs("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    outs, strays, xs = {}, [], [call.input(f"x{i}") for i in range(3)]
    for i, x in enumerate(xs):
        out = watched_call(compiled, model, x, "torch.compile(FixedScorer, fullgraph=True)", strays)
        out.sum().backward()
        outs[f"out{i}"] = plain(out, "the compiled FixedScorer's output")
    strays += stray_reads(counter, model, xs)
    outside = outside_torch(counter.graphs, call.get("calibrate"), call.input("x0").shape[0])
    return Reply({"frames": counter.frame_count, "outside": outside, "strays": sorted(set(strays))[:5]}, outs)


def torch_calibrate(device: str, dtype: torch.dtype = torch.float32):
    """A pure-torch twin of ``calibrate`` (np.interp semantics) with its constants built up front.

    The traffic probe swaps it in for the learner's op, so the op's own host round trip (its known price) is
    not counted against the learner's forward."""
    xp = torch.tensor(CALIBRATION_X, dtype=dtype, device=device)
    fp = torch.tensor(CALIBRATION_Y, dtype=dtype, device=device)

    def interp(top: torch.Tensor) -> torch.Tensor:
        i = torch.searchsorted(xp, top.detach().contiguous()).clamp(1, len(xp) - 1)
        t = ((top.detach() - xp[i - 1]) / (xp[i] - xp[i - 1])).clamp(0, 1)
        return fp[i - 1] + t * (fp[i] - fp[i - 1])

    return interp


@probe("ex02.traffic")
def traffic(call: Call) -> Reply:
    """Host/device traffic of FixedScorer's forward on batch ``x1``, after one call on batch ``x0``, with
    ``calibrate`` replaced by a pure-torch twin. The watched call gets another batch than the first, both kept
    alive: work cached per input object or address, or per shape, still shows (red team, session 40: a forward
    that kept its ``.item()`` and ``nonzero()`` results per input tensor synced only on the unwatched call)."""
    model = fixed_scorer(call)
    call.get("calibrate")
    first, x = call.input("x0"), call.input("x1")
    learner_op = call.namespace["calibrate"]
    call.namespace["calibrate"] = torch_calibrate(call.device)  # the op's own host round trip is its known price
    try:
        learner_call(model, (first,), "FixedScorer")
        with watch_traffic(call.device) as seen:
            out = model(x)
    finally:
        call.namespace["calibrate"] = learner_op
    return Reply(
        {"syncs": dict(seen.syncs), "host_tensors": dict(seen.host_tensors), "summary": seen.summary()},
        {"out1": plain(out, "FixedScorer's output")},
    )


@probe("ex02.timed_scorer")
def timed_scorer(call: Call) -> Reply:
    """Stage forward + backward of the compiled FixedScorer for ``timing.run``, after one call on the judge's
    input through a counting backend: the linear layers its graphs hold (none where forward ran eagerly)."""
    torch.compiler.reset()
    model = fixed_scorer(call)
    counter = graph_runs("inductor", detail=False)
    compiled = torch.compile(model, backend=counter)

    def fwd_bwd(x: torch.Tensor) -> torch.Tensor:
        out = compiled(x)
        out.square().sum().backward()
        return out

    # the parameters' gradients join each call's fingerprint: the backward's work shows, not only the output's
    # and every timed call must call the linear layers in compiled graphs
    work = compiled_work(counter, linear_calls)
    reply = stage_timed(call, call.arg("handle"), fwd_bwd, params=tuple(model.parameters()), work=work)
    learner_call(fwd_bwd, (call.input("x"),), "the compiled FixedScorer")
    model.zero_grad(set_to_none=True)
    return Reply({**reply.values, "linears": sum(linear_calls(g) for g in counter.graphs)})
