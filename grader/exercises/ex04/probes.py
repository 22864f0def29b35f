"""Exercise 4, worker side: the learner's buckets, collate, MaskedTagger and compiled stream on the judge's data."""

from __future__ import annotations

import torch
from torch import nn

from coursekit.lessons.dynamic_shapes.givens import MAX_LEN, NaiveTagger
from grader.probing import (
    Call,
    Failure,
    Reply,
    graph_runs,
    learner_call,
    learner_int,
    linear_calls,
    module_tensors,
    plain,
    probe,
)


@probe("ex04.buckets")
def buckets(call: Call) -> Reply:
    """``bucket_length(n)`` for every n in 1..MAX_LEN."""
    bucket_length = call.get("bucket_length")
    values = []
    for n in range(1, MAX_LEN + 1):
        b = learner_call(bucket_length, (n,), f"bucket_length({n})")
        values.append(learner_int(b, f"bucket_length({n})", f"It must be an int of at least {n}."))
    return Reply({"lengths": values})


def seqs_of(call: Call, name: str) -> list[torch.Tensor]:
    """A batch of sequences the judge sent as ``name.0``, ``name.1``, ... (CPU tensors, as collate gets them)."""
    return [call.inputs[f"{name}.{i}"] for i in range(int(call.arg("rows")[name]))]


def collated(call: Call, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    out = learner_call(call.get("collate"), (seqs_of(call, name),), "collate")
    if not (isinstance(out, tuple) and len(out) == 2):
        raise Failure("collate must return a tuple (tokens, mask)")
    return out


@probe("ex04.collate")
def collated_batches(call: Call) -> Reply:
    """``collate`` on each of the judge's batches: tokens and mask."""
    tensors = {}
    for name in call.arg("rows"):
        tokens, mask = collated(call, name)
        tensors |= {f"{name}.tokens": plain(tokens, "collate's tokens"), f"{name}.mask": plain(mask, "collate's mask")}
    return Reply(tensors=tensors)


def tagger(call: Call) -> nn.Module:
    """The learner's MaskedTagger with the judge's weights, on the device."""
    factory = call.get("MaskedTagger")
    if not (isinstance(factory, type) and issubclass(factory, NaiveTagger)):
        raise Failure("MaskedTagger must subclass NaiveTagger (class MaskedTagger(NaiveTagger))")
    model = factory()
    weights = {k.removeprefix("w."): v for k, v in call.inputs.items() if k.startswith("w.")}
    missing, _ = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k in weights]
    if missing:
        raise Failure(f"MaskedTagger lacks NaiveTagger's parameters {missing}: subclass NaiveTagger")
    return model.to(call.device)


def run_batches(
    call: Call, fn, names: list[str], counter=None, model: nn.Module | None = None
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``fn`` on each named batch, in order: the outputs, and (with a ``counter``, see ``graph_runs``) the names of
    the batches that called no compiled graph holding the tagger on their own tokens or mask: the graphs called on
    them must hold, together, the tagger's linear layers (the judge's ``tagger_linears``). Eager fallbacks, code that
    stops compiling, and compiled calls on anything else do not count: a token compile on a stand-in input beside
    eager work (red team, session 35: the real batch run eagerly beside a compiled call on a 1x4 dummy took every
    stream point, at 5x the reference's speed), or a tiny compiled graph on the batch's own mask beside the tagger
    compiled once on a 1x4 copy and then run eagerly (red team, session 37: all 11 points, at 5.0x against the
    reference's 1.87x). The output itself must come from the last graph run, one that holds the tagger's linear
    layers and read nothing but the batch and ``model``'s own tensors, which the stream must leave unchanged (red
    team, session 47: a graph holding the three layers, called on the batch's tokens but computing on a 1x4 slice
    of them, beside the real batch run eagerly, took all 6 stream points at 3.9x against the reference's 1.8x)."""
    outs, eager, linears = {}, [], {}
    want = int(call.arg("tagger_linears", 0)) if counter is not None else 0
    held = module_tensors(model) if model is not None else set()
    weights = {id(t): t.detach().clone() for t in (*model.parameters(), *model.buffers())} if model is not None else {}

    def layers(graph: torch.fx.GraphModule) -> int:
        return int(linear_calls(graph) >= want)

    for name in names:
        tokens, mask = collated(call, name)
        plain(tokens, "collate's tokens")
        args = (tokens.to(call.device), mask.to(call.device))
        before = len(counter.calls) if counter is not None else 0
        if counter is not None:
            counter.last = None
        with torch.no_grad():
            out = learner_call(fn, args, "MaskedTagger")
        outs[f"{name}.out"] = plain(out, "MaskedTagger's output")
        if counter is not None:
            own = {(a.data_ptr(), tuple(a.shape)) for a in args}
            graphs = {index for index, seen in counter.calls[before:] if own & seen}
            for index in graphs - linears.keys():
                linears[index] = linear_calls(counter.graphs[index])
            made = model is None or counter.returned(out, layers, held | {a.data_ptr() for a in args})
            if not graphs or sum(linears[index] for index in graphs) < want or not made:
                eager.append(name)
    if model is not None and any(
        not torch.equal(t, weights[id(t)]) for t in (*model.parameters(), *model.buffers()) if id(t) in weights
    ):
        eager = list(names)  # the tagger's own tensors carried something between calls
    return outs, eager


@probe("ex04.outputs")
def outputs(call: Call) -> Reply:
    """MaskedTagger (compiled with ``compile_tagger`` when asked) on each batch, in order."""
    model = tagger(call)
    if call.arg("compiled"):
        torch.compiler.reset()
        model = learner_call(call.get("compile_tagger"), (model,), "compile_tagger")
    return Reply(tensors=run_batches(call, model, list(call.arg("rows")))[0])


@probe("ex04.counted")
def counted(call: Call) -> Reply:
    """The stream compiled with a counting backend: frames after it (and whether a recompile was refused under
    ``set_stance("fail_on_recompile")`` after one warm-up batch per bucket, when asked), the linear layers its
    graphs hold, and the stream's batches that called no compiled graph holding the tagger (``tagger_linears``)
    on their own tokens or mask."""
    model = tagger(call)
    torch.compiler.reset()
    counter = graph_runs("inductor")
    compile_tagger = call.get("compile_tagger")
    compiled = learner_call(lambda: compile_tagger(model, backend=counter), (), "compile_tagger")
    warm = [n for n in call.arg("rows") if n.startswith("warm")]
    stream = [n for n in call.arg("rows") if n.startswith("stream")]
    run_batches(call, compiled, warm)
    recompiled, eager, warmed = None, [], counter.frame_count
    if call.arg("stance"):
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                outs, eager = run_batches(call, compiled, stream, counter, model)
        except Failure as exc:
            recompiled, outs = str(exc)[:300], {}
        if recompiled is None and counter.frame_count > warmed:  # a stance set inside the learner's code (red team,
            recompiled = (  # session 39: set_stance("default") around the compiled call hid a recompile a batch)
                f"{counter.frame_count - warmed} more graph(s) compiled under set_stance('fail_on_recompile'): does "
                "your code set a stance of its own?"
            )
    else:
        outs, eager = run_batches(call, compiled, stream, counter, model)
    linears = sum(linear_calls(g) for g in counter.graphs)
    return Reply(
        {"frames": counter.frame_count, "recompiled": recompiled, "linears": linears, "eager": len(eager)}, outs
    )


@probe("ex04.cold_stream")
def cold_stream(call: Call) -> Reply:
    """A cold stream, timed by the judge: compile_tagger on a fresh compile state, then every batch in order.
    Every batch's output comes back: the judge checks batches it picks after the answer arrived. The backend
    counts what it compiles: the linear layers in its graphs (none where the model ran eagerly), and how many
    batches called no compiled graph holding the tagger (``tagger_linears``) on their own tokens or mask."""
    model = tagger(call)
    torch.compiler.reset()
    counter = graph_runs(call.arg("backend"))
    compile_tagger = call.get("compile_tagger")
    compiled = learner_call(lambda: compile_tagger(model, backend=counter), (), "compile_tagger")
    outs, eager = run_batches(call, compiled, list(call.arg("rows")), counter, model)
    if torch.device(call.device).type == "cuda":
        torch.cuda.synchronize()
    return Reply({"linears": sum(linear_calls(g) for g in counter.graphs), "eager": len(eager)}, outs)
