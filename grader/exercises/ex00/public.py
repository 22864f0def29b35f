"""Exercise 0, public checks (ship in the learner kit): the graph Dynamo hands a backend, compiles counted per
input shape with ``dynamic=False``, and the kernel Inductor generates. Each compares with the given functions
themselves or a counting rule, never with a reference solution. The hidden checks live in ``hidden.py``.
"""

from __future__ import annotations

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
            f"{got.text('type_error', limit=300)}. Extra inputs such as `s0` are symbolic sizes: Dynamo "
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


def distinct_so_far(shapes: list[tuple[int, ...]]) -> list[int]:
    """With ``dynamic=False`` Dynamo compiles once per new shape: the number of distinct shapes so far."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for shape in shapes:
        seen.add(tuple(shape))
        out.append(len(seen))
    return out


def counts(learner, cases: list[tuple[str, list[tuple[int, ...]], bool | None]]) -> list[list[int]]:
    """The learner's ``count_compiles(fn, shapes, dynamic)`` for each case, run back to back in the worker."""
    got = learner.ask(
        "ex00.counts",
        {"cases": [{"fn": f, "shapes": [list(s) for s in shapes], "dynamic": d} for f, shapes, d in cases]},
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
    """With dynamic=False, count_compiles reports one compile per new input shape, after each call."""
    cases = [[(6,), (9,), (12,), (6,)], [(4, 3), (4, 3), (4, 5), (2, 5)]]
    got = counts(learner, [("scale_shift", shapes, False) for shapes in cases])
    for shapes, g in zip(cases, got):
        want = distinct_so_far(shapes)
        if g != want:
            hint = (
                "Your counts are lower: was dynamic=False passed on to torch.compile? By default a size that "
                "changes becomes symbolic after one recompile (automatic dynamic). "
                if sum(g) < sum(want)
                else ""
            )
            raise Shortfall(
                f"shapes {shapes} with dynamic=False: your compiles so far are {g}, expected {want} "
                f"(a new graph for each new shape, none for a shape seen before). {hint}{COUNT_HINT}",
                measured=g[-1],
                required=want[-1],
            )
    want = distinct_so_far(cases[-1])
    return Measured(want[-1], want[-1], f"compiles so far {want} for shapes {cases[-1]}")


@check("ex00.inductor.code", kind="structure", points=2, needs=("inductor_code",), public=True)
def inductor_kernel(learner, ctx) -> None:
    """inductor_code returns Inductor's generated code for the device: one fused kernel, sized for the inputs."""
    gen = torch.Generator().manual_seed(1)
    args = {f"arg{i}": torch.randn(5, 3, generator=gen) for i in range(2)}
    code = learner.ask("ex00.inductor_code", {}, args).text("code", limit=200_000)
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
    if "(5, 3)" not in code:
        raise AssertionError(
            "the code does not mention the inputs' shape (5, 3): was it generated for these "
            "arguments? The first compile specialises the code to the shapes it sees."
        )
