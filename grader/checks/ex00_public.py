"""Exercise 0, public checks: the ones a learner runs inside the self-check notebook.

This module ships in the learner kit (``make release``): the graph Dynamo hands
a backend, compiles counted per input shape with ``dynamic=False``, and the
kernel Inductor generates. The hidden checks (Python control flow in a captured
function, unseen shapes under every ``dynamic`` setting, repeated counts) live in
``grader.checks.ex00``, which imports from here.
"""

from __future__ import annotations

import torch

from coursekit.ex00 import graph_calls, kernel_names
from grader.checks.common import assert_close, require_tensor
from grader.registry import Measured, Shortfall, check

CAPTURE_HINT = ("Compile fn with a backend of your own, `def backend(gm, example_inputs)`, that keeps the "
                "torch.fx.GraphModule Dynamo hands it and returns gm.forward; call the compiled function once on "
                "args, then return the graph.")
COUNT_HINT = ("Start from a clean slate (torch.compiler.reset()), compile fn with a counting backend "
              "(torch._dynamo.testing.CompileCounter()) and dynamic=dynamic, call it on torch.randn(shape) for each "
              "shape, and record counter.frame_count after each call.")


def gate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The public check's function to capture: three element-wise functions, a method and two operators."""
    return torch.sigmoid(x) * torch.tanh(y) + x.relu()


def scale_shift(x: torch.Tensor) -> torch.Tensor:
    """The public check's function to count compiles of (any shape will do)."""
    return x * 2 + 1


def sin_cos(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The public check's function for Inductor: one element-wise kernel on any device."""
    return torch.sin(x) + torch.cos(y) * 2


def first_output(out: object, what: str) -> torch.Tensor:
    """A captured graph returns a tuple of outputs: its only one, checked to be a tensor."""
    if isinstance(out, (tuple, list)):
        if len(out) != 1:
            raise AssertionError(f"{what} returned {len(out)} outputs; the function has one")
        out = out[0]
    return require_tensor(out, what)


def captured(sub, fn, *args) -> torch.fx.GraphModule:
    """The learner's ``capture_graph(fn, *args)``, checked to be an FX graph."""
    gm = sub.get("capture_graph")(fn, *args)
    if not isinstance(gm, torch.fx.GraphModule):
        raise AssertionError(f"capture_graph returned a {type(gm).__name__}, not a torch.fx.GraphModule. "
                             + CAPTURE_HINT)
    return gm


def check_graph_runs(gm: torch.fx.GraphModule, fn, args: tuple, what: str) -> None:
    """Running ``gm`` on ``args`` gives what ``fn`` gives."""
    try:
        out = gm(*args)
    except TypeError as exc:
        inputs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        raise AssertionError(f"the graph captured from {what} takes the inputs {inputs}, and calling it with the "
                             f"function's {len(args)} argument(s) raised TypeError: {exc}. Extra inputs such as `s0` "
                             "are symbolic sizes: Dynamo had compiled this function before and, after a size "
                             "changed, made that size dynamic. Start capture_graph with torch.compiler.reset() so "
                             "that each capture is a fresh compile.") from None
    out = first_output(out, f"the graph captured from {what}")
    assert_close(out, fn(*args), torch.float32, f"the graph captured from {what}, run on the same inputs",
                 "A captured graph is ordinary Python code (print(gm.code)) that computes what the function did.")


def counts(sub, fn, shapes: list[tuple[int, ...]], dynamic: bool | None) -> list[int]:
    """The learner's ``count_compiles(fn, shapes, dynamic)``, checked to be one int per call."""
    got = sub.get("count_compiles")(fn, shapes, dynamic=dynamic)
    if not isinstance(got, (list, tuple)) or len(got) != len(shapes) or not all(isinstance(n, int) for n in got):
        raise AssertionError(f"count_compiles must return a list of {len(shapes)} ints (graphs compiled so far "
                             f"after each call), got {got!r}. {COUNT_HINT}")
    return list(got)


def distinct_so_far(shapes: list[tuple[int, ...]]) -> list[int]:
    """With ``dynamic=False`` Dynamo compiles once per new shape: the number of distinct shapes so far."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for shape in shapes:
        seen.add(tuple(shape))
        out.append(len(seen))
    return out


@check("ex00.capture.graph", kind="correctness", points=2, needs=("capture_graph",), public=True)
def capture_graph_ops(sub, ctx) -> None:
    """capture_graph returns the FX graph Dynamo captured: the function's operations, and it computes the same."""
    gen = torch.Generator().manual_seed(0)
    args = tuple(torch.randn(6, 5, generator=gen).to(ctx.device) for _ in range(2))
    gm = captured(sub, gate, *args)
    calls = graph_calls(gm)
    missing = {"sigmoid", "tanh", "mul", "add", "Tensor.relu"} - set(calls)
    if missing:
        raise AssertionError(f"the graph's operations are {calls}, without {sorted(missing)}, for "
                             "`torch.sigmoid(x) * torch.tanh(y) + x.relu()`: is it the graph of the function you "
                             "were given, captured on these arguments? " + CAPTURE_HINT)
    check_graph_runs(gm, gate, args, "sigmoid(x) * tanh(y) + x.relu()")


@check("ex00.recompiles.count", kind="structure", points=2, needs=("count_compiles",), public=True)
def recompiles_static(sub, ctx) -> Measured:
    """With dynamic=False, count_compiles reports one compile per new input shape, after each call."""
    cases = [[(6,), (9,), (12,), (6,)], [(4, 3), (4, 3), (4, 5), (2, 5)]]
    for shapes in cases:
        got, want = counts(sub, scale_shift, shapes, dynamic=False), distinct_so_far(shapes)
        if got != want:
            hint = ("Your counts are lower: was dynamic=False passed on to torch.compile? By default a size that "
                    "changes becomes symbolic after one recompile (automatic dynamic). " if sum(got) < sum(want)
                    else "")
            raise Shortfall(f"shapes {shapes} with dynamic=False: your compiles so far are {got}, expected {want} "
                            f"(a new graph for each new shape, none for a shape seen before). {hint}{COUNT_HINT}",
                            measured=got[-1], required=want[-1])
    return Measured(want[-1], want[-1], f"compiles so far {want} for shapes {cases[-1]}")


@check("ex00.inductor.code", kind="structure", points=2, needs=("inductor_code",), public=True)
def inductor_kernel(sub, ctx) -> None:
    """inductor_code returns Inductor's generated code for the device: one fused kernel, sized for the inputs."""
    gen = torch.Generator().manual_seed(1)
    args = tuple(torch.randn(5, 3, generator=gen).to(ctx.device) for _ in range(2))
    code = sub.get("inductor_code")(sin_cos, *args)
    if not isinstance(code, str):
        raise AssertionError(f"inductor_code must return the generated code as one str, got {type(code).__name__}"
                             " (run_and_get_code gives a list of str: join them)")
    if "def call(" not in code:
        raise AssertionError("inductor_code returned no Inductor module (it has no `def call(`): nothing was "
                             "compiled while it ran. Pass the *compiled* function, torch.compile(fn), to "
                             "torch._inductor.utils.run_and_get_code, which calls it and collects the code.")
    kernels = kernel_names(code)
    prefix, language = ("triton_", "Triton") if ctx.profile.device_class == "cuda" else ("cpp_", "C++")
    fused = [k for k in kernels if k.startswith(prefix) and "sin" in k and "cos" in k]
    if not fused:
        raise AssertionError(f"the code's kernels are {kernels}: expected one {language} kernel for {ctx.device} "
                             f"named after both sin and cos (like {prefix}...fused_add_cos_mul_sin_0), because "
                             "Inductor fuses the whole element-wise expression into one loop. Compile with the "
                             "default backend (inductor), on the tensors you were given.")
    if "(5, 3)" not in code:
        raise AssertionError("the code does not mention the inputs' shape (5, 3): was it generated for these "
                             "arguments? The first compile specialises the code to the shapes it sees.")
