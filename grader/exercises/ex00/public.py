"""Exercise 0, public checks (ship in the learner kit): the graph Dynamo hands a backend, compiles counted per
new guard with ``dynamic=False``, and the kernel Inductor generates. Each compares with the given functions
themselves or a counting rule, never with a reference solution. The hidden checks live in ``hidden.py``.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from coursekit.lessons.orientation.givens import kernel_names
from grader.exercises.ex00.probes import CAPTURE_HINT, COUNT_HINT, FUNCTIONS
from grader.judging import assert_close
from grader.registry import Measured, Shortfall, check


def captured(learner, fn: str, args: tuple[torch.Tensor, ...], ops: set[str], absent: str | None, what: str) -> None:
    """``capture_graph`` on ``fn``: a graph whose operations include ``ops`` (and not ``absent``) and that computes
    what ``fn`` computes on ``args``."""
    got = learner.ask("ex00.capture", {"fn": fn, "arity": len(args)}, {f"arg{i}": a for i, a in enumerate(args)})
    if got.values.get("trace_error") is not None:
        raise AssertionError(
            f"capture_graph raised TraceError ({got.text('trace_error', limit=120)}) on {what}. "
            "torch.fx.symbolic_trace runs the function on proxies that have no sizes, so Python "
            "cannot decide a branch on a shape; Dynamo runs it on the real inputs, records the branch "
            "taken and guards on the shape. Capture with torch.compile and a backend of your own."
        )
    calls = got.strings("calls")
    missing = ops - set(calls)
    if missing or (absent and absent in calls):
        raise AssertionError(
            f"the graph's operations for {what} are {calls}: expected {sorted(ops)}"
            + (f" and no {absent}" if absent else "")
            + ". Is it the graph of the function you were "
            "given, captured on these arguments, by *this* call (a fresh list or variable per call, "
            "not one kept from an earlier call)? " + CAPTURE_HINT
        )
    if got.values.get("type_error") is not None:
        raise AssertionError(
            f"the graph captured from {what} takes the inputs {got.strings('inputs')}, and calling it "
            f"with the function's {len(args)} argument(s) raised TypeError: "
            f"{got.text('type_error', limit=300)}. Extra inputs such as `s77` are symbolic sizes: Dynamo "
            "had compiled this function before and, after a size changed, made that size dynamic. "
            "Start capture_graph with torch.compiler.reset() so that each capture is a fresh compile."
        )
    assert_close(
        got.tensor("out"),
        FUNCTIONS[fn](*args),
        torch.float32,
        f"the graph captured from {what}, run on the same inputs",
        "A captured graph is ordinary Python code (print(gm.code)) that computes what the function did.",
    )


Arg = dict[str, Any]  # one argument, as probes.build_call reads it


def tensor(*shape: int, dtype: str = "float32", grad: bool = False) -> Arg:
    """A fresh random tensor of this shape and dtype, requiring gradients or not."""
    return {"shape": list(shape), "dtype": dtype, "grad": grad}


def number(value: float) -> Arg:
    """A Python int or float."""
    return {"int": value} if isinstance(value, int) else {"float": value}


def guard_key(call: list[Arg]) -> tuple:
    """What Dynamo's guards see of one call with ``dynamic=False``: each tensor's shape, dtype and requires_grad,
    and each number's type and value."""
    return tuple(tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in arg.items())) for arg in call)


def describe(call: list[Arg]) -> str:
    """``(float64[4, 3] requires_grad, 2)``, as a learner would write the call."""
    parts = []
    for arg in call:
        if "shape" in arg:
            grad = " requires_grad" if arg["grad"] else ""
            parts.append(f"{arg['dtype']}{list(arg['shape'])}{grad}")
        else:
            parts.append(repr(arg.get("int", arg.get("float"))))
    return "(" + ", ".join(parts) + ")"


def describe_calls(calls: list[list[Arg]]) -> str:
    return "[" + ", ".join(describe(c) for c in calls) + "]"


def distinct_so_far(calls: list[list[Arg]]) -> list[int]:
    """With ``dynamic=False`` Dynamo compiles once per call whose guards no earlier graph passes: the number of
    distinct guard keys so far."""
    seen: set[tuple] = set()
    out = []
    for call in calls:
        seen.add(guard_key(call))
        out.append(len(seen))
    return out


def counts(learner, cases: list[tuple[str, list[list[Arg]], bool | None]]) -> list[list[int]]:
    """The learner's ``count_compiles(fn, calls, dynamic)`` for each case, run back to back in the worker."""
    got = learner.ask(
        "ex00.counts",
        {"cases": [{"fn": f, "calls": calls, "dynamic": d} for f, calls, d in cases]},
    )
    lists = got.value("counts", list)
    if len(lists) != len(cases) or not all(
        isinstance(c, list) and len(c) == len(s) and all(isinstance(n, int) and not isinstance(n, bool) for n in c)
        for c, (_, s, _) in zip(lists, cases)
    ):
        from grader.protocol import ProtocolError

        raise ProtocolError("probe ex00.counts answered with malformed counts")
    return lists


@check("ex00.capture.graph", kind="correctness", points=2, needs=("capture_graph",), public=True)
def capture_graph_ops(learner, ctx) -> None:
    """capture_graph returns the FX graph Dynamo captured: the function's operations, and it computes the same."""
    gen = torch.Generator().manual_seed(0)
    args = tuple(torch.randn(6, 5, generator=gen) for _ in range(2))
    captured(
        learner,
        "gate",
        args,
        {"sigmoid", "tanh", "mul", "add", "Tensor.relu"},
        None,
        "`torch.sigmoid(x) * torch.tanh(y) + x.relu()`",
    )


@check("ex00.recompiles.count", kind="structure", points=2, needs=("count_compiles",), public=True)
def recompiles_static(learner, ctx) -> Measured:
    """With dynamic=False, count_compiles reports one compile per new combination of guarded properties (a tensor's
    shape, dtype and requires_grad, a Python number's value), after each call."""
    cases = [
        [[tensor(6), number(2)], [tensor(6), number(2)], [tensor(6, dtype="float64"), number(2)]]
        + [[tensor(6), number(3)], [tensor(6, grad=True), number(3)], [tensor(6), number(3)]],
        [[tensor(4, 3), number(2)], [tensor(4, 3), number(2)], [tensor(4, 5), number(2)], [tensor(4, 7), number(2)]]
        + [[tensor(2, 7), number(2)], [tensor(2, 7, dtype="bfloat16"), number(2)]],
    ]
    got = counts(learner, [("affine", calls, False) for calls in cases])
    for i, (calls, g) in enumerate(zip(cases, got)):
        want = distinct_so_far(calls)
        if g != want:
            if i and got[0] == distinct_so_far(cases[0]):
                hint = (
                    "The first count was right, this one came right after it: did graphs compiled for the first "
                    "count stay attached to the function? They count towards torch._dynamo.config.recompile_limit "
                    f"({torch._dynamo.config.recompile_limit}), after which Dynamo runs the function eagerly without "
                    "compiling. "
                )
            elif sum(g) < sum(want):
                hint = (
                    "Your counts are lower: was dynamic=False passed on to torch.compile? By default a size or an "
                    "integer that changes becomes symbolic after one recompile (automatic dynamic). "
                )
            else:
                hint = ""
            raise Shortfall(
                f"calls {describe_calls(calls)} of `x * k + 1` with dynamic=False: your compiles so far are {g}, "
                f"expected {want} (a new graph for each new combination of shape, dtype, requires_grad and "
                f"number, none for one seen before). {hint}{COUNT_HINT}",
                measured=g[-1],
                required=want[-1],
            )
    want = distinct_so_far(cases[0])
    return Measured(want[-1], want[-1], f"compiles so far {want} for calls {describe_calls(cases[0])}")


def judge_code(args: dict[str, torch.Tensor], ctx) -> str:
    """The code Inductor generates for ``sin_cos`` on ``args``, compiled here in the judge, from a clean slate, with a
    worker's thread count (a C++ kernel's parallel loop depends on it). A text made up without compiling lacks its
    kernel (red team, session 40), and a worker's own compile could be patched by the learner code beside it."""
    from torch._inductor.utils import run_and_get_code

    before = torch.get_num_threads()
    torch.set_num_threads(ctx.profile.threads)
    torch.compiler.reset()
    try:
        _, code = run_and_get_code(torch.compile(FUNCTIONS["sin_cos"]), *(a.to(ctx.device) for a in args.values()))
    finally:
        torch.compiler.reset()
        torch.set_num_threads(before)
    return "\n".join(code)


def kernel_source(code: str, name: str) -> str:
    """Kernel ``name``'s definition in Inductor's generated code: from its name to the end of the string that holds
    its C++ or Triton source ("" where there is none)."""
    start = code.find(f"{name} = async_compile.")
    opening = code.find("'''", start) if start >= 0 else -1
    end = code.find("'''", opening + 3) if opening >= 0 else -1
    return code[start : end + 3] if end >= 0 else ""


@check("ex00.inductor.code", kind="structure", points=2, needs=("inductor_code",), public=True)
def inductor_kernel(learner, ctx) -> None:
    """inductor_code returns Inductor's generated code for the device: one fused kernel, sized for the inputs."""
    shape_rng = random.Random(ctx.seed("ex00.inductor shape"))
    shape = (shape_rng.randint(3, 12), shape_rng.randint(2, 9))
    gen = torch.Generator().manual_seed(1)
    args = {f"arg{i}": torch.randn(*shape, generator=gen) for i in range(2)}
    got = learner.ask("ex00.inductor_code", {}, args)
    code = got.text("code", limit=200_000)
    if "def call(" not in code:
        raise AssertionError(
            "inductor_code returned no Inductor module (it has no `def call(`): nothing was "
            "compiled while it ran. Pass the *compiled* function, torch.compile(fn), to "
            "torch._inductor.utils.run_and_get_code, which calls it and collects the code."
        )
    kernels = kernel_names(code)
    prefix, language = ("triton_", "Triton") if ctx.profile.device_class == "cuda" else ("cpp_", "C++")
    fused = [k for k in kernels if k.startswith(prefix) and "sin" in k and "cos" in k]
    if not fused:
        raise AssertionError(
            f"the code's kernels are {kernels[:10]}: expected one {language} kernel for {ctx.device} "
            f"named after both sin and cos (like {prefix}...fused_add_cos_mul_sin_0), because "
            "Inductor fuses the whole element-wise expression into one loop. Compile with the "
            "default backend (inductor), on the tensors you were given."
        )
    if str(shape) not in code:
        raise AssertionError(
            f"the code does not mention the inputs' shape {shape}: was it generated for these "
            "arguments? The first compile specialises the code to the shapes it sees."
        )
    own = judge_code(args, ctx)
    sources = [kernel_source(own, k) for k in kernel_names(own) if "sin" in k and "cos" in k]
    if not sources or not all(sources) or not any(source in code for source in sources):
        raise AssertionError(
            f"the code names {fused[0]}, but its source is not the one Inductor generates for these inputs (the "
            "grader compiled sin_cos on the same inputs itself and compared): return the text "
            "torch._inductor.utils.run_and_get_code collected while the compiled function ran, unedited, with "
            "torch.compile's default settings."
        )
