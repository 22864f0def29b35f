"""Exercise 0, worker side: the learner's graph capture, compile counts and Inductor code, on the judge's inputs.

The functions handed to the learner's code live here, because the learner's code runs here.
"""

from __future__ import annotations

from typing import Any

import torch

from coursekit.lessons.orientation.givens import graph_calls
from grader.probing import Call, Failure, Reply, learner_call, learner_int, ordinal, plain, probe

CAPTURE_HINT = (
    "Compile fn with a backend of your own, `def backend(gm, example_inputs)`, that keeps the "
    "torch.fx.GraphModule Dynamo hands it and returns gm.forward; call the compiled function once on "
    "args, then return the graph."
)
COUNT_HINT = (
    "Start from a clean slate (torch.compiler.reset()), compile fn with a counting backend "
    "(torch._dynamo.testing.CompileCounter()) and dynamic=dynamic, call it on each tuple of arguments in "
    "turn (compiled(*args)), and record counter.frame_count after each call."
)


def gate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The public check's function to capture: three element-wise functions, a method and two operators."""
    return torch.sigmoid(x) * torch.tanh(y) + x.relu()


def affine(x: torch.Tensor, k: float) -> torch.Tensor:
    """The public check's function to count compiles of: a tensor of any shape and a Python number."""
    return x * k + 1


def sin_cos(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The public check's function for Inductor: one element-wise kernel on any device."""
    return torch.sin(x) + torch.cos(y) * 2


def branchy(x: torch.Tensor) -> torch.Tensor:
    """Python decides, from a shape, which half runs: Dynamo records only the half that ran."""
    if x.shape[0] > 4:
        return torch.tanh(x) * 2
    return torch.sigmoid(x) - 1


def centred(x: torch.Tensor, k: float) -> torch.Tensor:
    """A second function to count compiles of (a tensor of any rank, and a Python number)."""
    return (x - x.mean()) * k


FUNCTIONS = {f.__name__: f for f in (gate, affine, sin_cos, branchy, centred)}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def build_call(spec: list[dict[str, Any]]) -> tuple[Any, ...]:
    """One call's arguments from the judge's description: ``{"shape", "dtype", "grad"}`` is a fresh random tensor,
    ``{"int": n}`` and ``{"float": v}`` are Python numbers."""
    args: list[Any] = []
    for arg in spec:
        if "shape" in arg:
            shape = tuple(int(n) for n in arg["shape"])
            args.append(torch.randn(shape, dtype=DTYPES[arg["dtype"]], requires_grad=bool(arg["grad"])))
        elif "int" in arg:
            args.append(int(arg["int"]))
        else:
            args.append(float(arg["float"]))
    return tuple(args)


@probe("ex00.capture")
def capture(call: Call) -> Reply:
    """The learner's ``capture_graph(fn, *args)``: the graph's operations and what it computes on ``args``."""
    fn = FUNCTIONS[call.arg("fn")]
    args = tuple(call.input(f"arg{i}") for i in range(int(call.arg("arity"))))
    try:
        gm = learner_call(call.get("capture_graph"), (fn, *args), "capture_graph", CAPTURE_HINT)
    except torch.fx.proxy.TraceError as exc:
        return Reply({"trace_error": str(exc).splitlines()[0][:200]})
    if not isinstance(gm, torch.fx.GraphModule):
        raise Failure(f"capture_graph returned a {type(gm).__name__}, not a torch.fx.GraphModule. " + CAPTURE_HINT)
    calls = graph_calls(gm)
    try:
        out = gm(*args)
    except TypeError as exc:
        inputs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        return Reply({"calls": calls, "type_error": str(exc)[:300], "inputs": inputs})
    if isinstance(out, (tuple, list)):
        if len(out) != 1:
            raise Failure(f"the captured graph returned {len(out)} outputs; the function has one")
        out = out[0]
    return Reply({"calls": calls}, {"out": plain(out, "the captured graph's output")})


def _counts(call: Call, fn_name: str, specs: list[list[dict]], dynamic: bool | None) -> list[int]:
    calls = [build_call(spec) for spec in specs]
    count_compiles = call.get("count_compiles")
    got = learner_call(lambda: count_compiles(FUNCTIONS[fn_name], calls, dynamic=dynamic), (), "count_compiles")
    if not isinstance(got, (list, tuple)) or len(got) != len(calls):
        raise Failure(
            f"count_compiles must return a list of {len(calls)} ints (graphs compiled so far after each "
            f"call), got {got!r:.200}. {COUNT_HINT}"
        )
    return [learner_int(n, f"count_compiles (its {ordinal(i + 1)} count)", COUNT_HINT) for i, n in enumerate(got)]


@probe("ex00.counts")
def counts(call: Call) -> Reply:
    """The learner's ``count_compiles`` for each requested case, back to back, in order."""
    return Reply({"counts": [_counts(call, case["fn"], case["calls"], case["dynamic"]) for case in call.arg("cases")]})


@probe("ex00.inductor_code")
def generated_code(call: Call) -> Reply:
    """The learner's ``inductor_code(sin_cos, x, y)``. The judge compiles the same call itself and looks for its
    kernel in the text (``public.judge_code``): a worker's own compile could be patched by learner code."""
    args = (call.input("arg0"), call.input("arg1"))
    code = learner_call(call.get("inductor_code"), (sin_cos, *args), "inductor_code")
    if not isinstance(code, str):
        raise Failure(
            f"inductor_code must return the generated code as one str, got {type(code).__name__} "
            "(run_and_get_code gives a list of str: join them)"
        )
    return Reply({"code": code[:200_000]})
