"""Exercise 5, worker side: plant the judge's compiler bugs in this process and run the learner's ladder,
bisection and fix under them.

The bugs must be planted where the learner's compile runs, so this process knows which operator is broken:
see ``grader/README.md`` for what that means for forging an answer. Every model runs on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.lessons.debugging.givens import GatedMLP, make_input, make_model
from coursekit.lessons.debugging.material import (
    Bug,
    TinyDistiller,
    gist,
    lesson_input,
    planted,
    reset_bisector,
    restore_dispatch_state,
)
from grader.probing import Call, Failure, Reply, graph_runs, linear_calls, plain, probe

DEVICE = "cpu"


def at_break_points(model: nn.Module) -> None:
    """Make every token's pre-activations exact values: ``up``'s weights zero, its bias the activation's inputs
    (a grid that stays off hardswish's kinks at +-3, where a derivative is only a convention) and the gate's inputs
    -8, -7.5, ..., 7.5."""
    half = model.up.out_features // 2
    activation = torch.linspace(-5.5, 5.5, half, dtype=torch.float64)
    gate = torch.arange(half, dtype=torch.float64) * 0.5 - 8.0
    with torch.no_grad():
        model.up.weight.zero_()
        model.up.bias.copy_(torch.cat([activation, gate]))


FIX_HINT = (
    "Rewrite each culprit operation in FixedGatedMLP (override normalise, activation or gate) with other "
    "operations that compute the same values, so that no planted bug is reached, in the forward or the backward."
)
# operators Inductor decomposes (a planted bug shows from aot_eager_decomp_partition on) ...
DECOMPOSED: dict[str, Callable] = {
    "elu": F.elu,
    "softplus": F.softplus,
    "mish": F.mish,
    "leaky_relu": lambda x: F.leaky_relu(x, negative_slope=0.1),
    "hardsigmoid": F.hardsigmoid,
    "silu": F.silu,
    "celu": F.celu,
}
# ... and operators it lowers as they are (a planted bug shows only with inductor)
LOWERED: dict[str, Callable] = {
    "exp": torch.exp,
    "sin": torch.sin,
    "cos": torch.cos,
    "atan": torch.atan,
    "expm1": torch.expm1,
    "erf": torch.erf,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "abs": torch.abs,
}
OPS = {**DECOMPOSED, **LOWERED}
# backward operators Inductor decomposes, with the forward operator whose gradient calls them: a planted bug
# changes only the gradients, from aot_eager_decomp_partition on
BACKWARD: dict[str, str] = {
    "elu_backward": "elu",
    "softplus_backward": "softplus",
    "mish_backward": "mish",
    "leaky_relu_backward": "leaky_relu",
    "hardsigmoid_backward": "hardsigmoid",
    "silu_backward": "silu",
}


class Probe(nn.Module):
    """A tiny model around one operator under test and a decoy: LayerNorm, a projection, both operators."""

    def __init__(self, op: str, decoy: str, dim: int = 16) -> None:
        super().__init__()
        self.op, self.decoy = op, decoy
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.norm(x))
        return OPS[self.op](h * 1.3 + 0.2) * 0.5 + OPS[self.decoy](h) - h.mean(-1, keepdim=True)


def subject(spec: dict[str, Any]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model and input the judge names: the exercise's GatedMLP or a ``Probe`` around an operator (frozen
    unless ``spec["grad"]``), or lesson 5's student/teacher loss; seeded weights, on the CPU."""
    seed, grad = int(spec["seed"]), bool(spec.get("grad"))
    if spec["model"] == "gated":
        return make_model(seed, DEVICE).requires_grad_(grad), (make_input(seed, DEVICE),)
    if spec["model"] == "probe":
        torch.manual_seed(seed)
        return Probe(spec["op"], spec["decoy"]).to(DEVICE).requires_grad_(grad), (make_input(seed, DEVICE, scale=1.0),)
    torch.manual_seed(seed)
    model = TinyDistiller(spec["mode"], dim=24, classes=6).to(DEVICE)
    return model, (lesson_input(seed, DEVICE, batch=3, tokens=5, dim=24),)


def call_learner(fn: Callable, args: tuple, what: str, hint: str = "") -> Any:
    """``fn(*args)``, with this process left usable afterwards: dispatcher state a crashed compile left behind
    is put back, and a bisection left half-way is switched off. A torch error escaping from learner code
    becomes an unsettled ``Failure`` (the judge then starts a fresh worker)."""
    failure = ""
    try:
        with restore_dispatch_state():
            try:
                return fn(*args)
            except (NotImplementedError, AssertionError):
                raise
            except Exception as exc:  # noqa: BLE001 - report it; torch may be half-way through a compile
                if not type(exc).__module__.startswith("torch"):
                    raise
                failure = f"{what} raised {type(exc).__name__}: {gist(exc)}. {hint}".strip()
            # the exception is gone here, and with it the failed compile's frames and dispatcher guards:
            # leaving the block now puts the dispatcher keys back for good
    finally:
        reset_bisector()
    raise Failure(failure, unsettled=True)


def bugs(call: Call) -> tuple[Bug, ...]:
    return tuple(Bug(kind, op) for kind, op in call.arg("bugs"))


@probe("ex05.ladder")
def ladder(call: Call) -> Reply:
    """The learner's ``first_failing_backend`` on the judge's model, with the judge's bugs planted."""
    model, args = subject(call.arg("subject"))
    fn = call.get("first_failing_backend")
    with planted(*bugs(call)):
        got = call_learner(
            fn,
            (model, args),
            f"first_failing_backend on {call.arg('case')}",
            "A crash inside torch.compile is a failing rung: catch it (except Exception) and return that backend.",
        )
    return Reply(
        {"answer": got if got is None or isinstance(got, str) else repr(got)[:100], "type": type(got).__name__}
    )


@probe("ex05.culprit")
def culprit(call: Call) -> Reply:
    """The learner's ``find_culprit`` on the judge's model, with the judge's bugs planted."""
    model, args = subject(call.arg("subject"))
    fn = call.get("find_culprit")
    with planted(*bugs(call)):
        got = call_learner(
            fn,
            (model, args),
            f"find_culprit on {call.arg('case')}",
            "The function you give do_bisect must return False on an exception, not raise it.",
        )
    if got is None:
        return Reply({"answer": None})
    if not (isinstance(got, tuple) and len(got) == 3):
        return Reply({"answer": repr(got)[:200], "malformed": True})
    return Reply({"answer": [x if x is None or isinstance(x, str) else repr(x)[:100] for x in got]})


def fixed_model(call: Call, seed: int, dtype: torch.dtype) -> nn.Module:
    """The learner's ``FixedGatedMLP`` loaded with a seeded ``GatedMLP``'s weights (scaled when asked)."""
    factory = call.get("FixedGatedMLP")
    if not (isinstance(factory, type) and issubclass(factory, GatedMLP)):
        raise Failure(
            "FixedGatedMLP must subclass GatedMLP (class FixedGatedMLP(GatedMLP)), so that it keeps the "
            "layers and the weights of the model it fixes"
        )
    reference = make_model(seed, DEVICE).to(dtype)
    fixed = factory().to(DEVICE, dtype)
    try:
        fixed.load_state_dict(reference.state_dict())
    except RuntimeError as exc:
        raise Failure(
            f"FixedGatedMLP cannot load a GatedMLP's state_dict: {str(exc)[:200]}. Keep the same "
            "parameters, so trained weights still load into the fixed model."
        ) from None
    if call.arg("up_scale"):
        with torch.no_grad():
            fixed.up.weight.mul_(float(call.arg("up_scale")))  # pre-activations far into every regime
    if call.arg("break_points", False):
        at_break_points(fixed)
    return fixed


def forward_backward(model: Callable, module: nn.Module, x: torch.Tensor, prefix: str) -> dict[str, torch.Tensor]:
    """The output of ``model(x)`` and the gradients of its sum with respect to ``module``'s parameters."""
    module.zero_grad(set_to_none=True)
    out = model(x)
    plain(out, "the model's output")
    out.sum().backward()
    return {
        f"{prefix}.out": out.detach().cpu(),
        **{f"{prefix}.grad.{n}": p.grad.detach().cpu() for n, p in module.named_parameters() if p.grad is not None},
    }


TAMPER_HINT = (
    "Your code changed Inductor's decomposition/lowering tables: fix the model, not the compiler. The grader "
    "plants its bugs in those tables to stand for a compiler bug you cannot patch in place (a bug in the torch you "
    "ship with); putting the original entries back (from a torch.compiler.disable helper, say) only hides the bugs "
    "from the grader, and the model still breaks on any other torch with that bug. " + FIX_HINT
)
MISSING = object()


def compiler_tables(bug: Bug) -> list[tuple[str, Callable[[], Any]]]:
    """Where Inductor looks up ``bug``'s layer for an operator: each table's name and how to read it now (module
    attributes are read at each call, so a table swapped for another shows)."""
    from torch._inductor import compile_fx, decomposition, graph, lowering

    if bug.layer == "decomposition":
        return [
            ("torch._inductor.decomposition.decompositions", lambda: decomposition.decompositions),
            ("torch._inductor.decomposition.fast_random_decomps()", lambda: decomposition.fast_random_decomps()),
            ("the table select_decomp_table() gives Inductor", lambda: compile_fx.select_decomp_table()),
        ]
    return [
        ("torch._inductor.lowering.lowerings", lambda: lowering.lowerings),
        ("the lowerings Inductor's graph lowering reads", lambda: graph.lowerings),
        ("torch._inductor.lowering.user_lowerings", lambda: graph.user_lowerings),  # they take priority
    ]


class PlantedGuard:
    """The planted bugs' entries in Inductor's tables, taken right after planting; ``check`` notes any entry that is
    no longer the very object planted (or a table swapped for another), and when it was seen (red team, session 37:
    a ``torch.compiler.disable`` helper at the top of ``forward`` put the original tables back, the graph break let
    Inductor compile the rest with no bug planted, and all 5 fix points went to a model left as it was)."""

    def __init__(self, bugs: tuple[Bug, ...]) -> None:
        self.entries = []
        for bug in bugs:
            for name, table in compiler_tables(bug):
                value = self._read(table, bug)
                if isinstance(value, Exception):  # a table this torch does not have (torch 2.11: no user_lowerings)
                    continue
                self.entries.append((f"{name}[aten.{bug.op}.default]", table, bug.overload, value))
        self.changed: list[str] = []
        self.when = ""

    @staticmethod
    def _read(table: Callable[[], Any], bug: Bug) -> Any:
        try:
            found = table()
            return found.get(bug.overload, MISSING) if isinstance(found, dict) else found
        except Exception as exc:  # noqa: BLE001 - a table learner code broke is a changed table
            return exc

    def check(self, when: str) -> None:
        if self.changed:
            return
        for name, table, key, value in self.entries:
            try:
                found = table()
                now = found.get(key, MISSING) if isinstance(found, dict) else found
            except Exception:  # noqa: BLE001 - a table that could be read when planted and now cannot: changed
                now = MISSING if value is not MISSING else None
            if now is not value:
                self.changed.append(name)
        if self.changed:
            self.when = when

    def raise_if_changed(self) -> None:
        if self.changed:
            raise Failure(
                f"{', '.join(self.changed[:3])} no longer held the bug the grader planted {self.when}. " + TAMPER_HINT,
                unsettled=True,  # learner code rewrote the compiler's state: the judge starts a fresh worker
            )


def culprits_in(graphs: list[tuple[torch.fx.GraphModule, list]], bugs: tuple[Bug, ...]) -> list[str]:
    """The planted bugs' operators found in the ATen graphs (forward and backward, before any decomposition) that
    AOTAutograd traces from the Dynamo graphs Inductor was given: the operators a planted bug reaches."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
    from torch._functorch.partitioners import default_partition

    broken = {bug.overload: f"aten.{bug.op}" for bug in bugs}
    found: set[str] = set()

    def record(gm: torch.fx.GraphModule) -> None:
        found.update(broken[n.target] for n in gm.graph.nodes if n.op == "call_function" and n.target in broken)

    def partition(joint: torch.fx.GraphModule, inputs: Any, **kwargs: Any) -> Any:
        record(joint)
        return default_partition(joint, inputs, **kwargs)

    def nop(gm: torch.fx.GraphModule, _: Any) -> Callable:
        record(gm)
        return make_boxed_func(gm.forward)

    for gm, example_inputs in graphs:
        aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop, partition_fn=partition)
    return sorted(found)


@probe("ex05.fix")
def fix(call: Call) -> Reply:
    """FixedGatedMLP's output and gradients eagerly, and compiled with Inductor (or the judge's counting backend)
    while the exercise's bugs are planted; with the planted operators the compiled graphs still call. The planted
    entries must stay in Inductor's tables throughout: before, during and after the compiled forward and backward,
    and when Inductor is handed each graph."""
    from torch._dynamo.backends.registry import lookup_backend

    from coursekit.lessons.debugging.givens import EXERCISE_BUGS

    dtype = getattr(torch, call.arg("dtype"))
    fixed = fixed_model(call, int(call.arg("seed")), dtype)
    x = call.input("x").to(DEVICE)  # the judge sends it to the profile's device; this exercise runs on the CPU
    out = call_learner(forward_backward, (fixed, fixed, x, "eager"), "FixedGatedMLP", FIX_HINT)
    values: dict[str, Any] = {}
    if call.arg("compiled"):
        counter = graph_runs("inductor", detail=False)
        inner = counter if call.arg("count") else lookup_backend("inductor")
        graphs: list[tuple[torch.fx.GraphModule, list]] = []
        with planted(*EXERCISE_BUGS):
            guard = PlantedGuard(EXERCISE_BUGS)

            def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
                guard.check("when Inductor was handed a graph of FixedGatedMLP to compile")
                graphs.append((gm, list(example_inputs)))
                return inner(gm, example_inputs)

            compiled = torch.compile(fixed, backend=backend)

            def guarded(inputs: torch.Tensor) -> torch.Tensor:
                guard.check("before the compiled FixedGatedMLP was called")
                result = compiled(inputs)
                guard.check("after the compiled FixedGatedMLP's forward")
                return result

            try:
                out |= call_learner(
                    forward_backward,
                    (guarded, fixed, x, "compiled"),
                    "torch.compile(FixedGatedMLP) with the planted bugs",
                    "A planted bug still reaches your model: run your ladder and find_culprit on "
                    "FixedGatedMLP, frozen and with parameters that require grad. " + FIX_HINT,
                )
            finally:
                guard.check("after the compiled FixedGatedMLP's backward")
                guard.raise_if_changed()
            if not graphs:  # red team, session 39: set_stance(force_backend="aot_eager") kept Inductor out
                raise Failure(
                    "the grader's backend was handed no graph of FixedGatedMLP: something chose another backend "
                    "(torch.compiler.set_stance(force_backend=...)?) or kept the model from compiling. " + FIX_HINT
                )
            try:
                values["culprits"] = culprits_in(graphs, EXERCISE_BUGS)
            except Exception as exc:  # noqa: BLE001 - the values are still compared; the scan is a second line
                values["culprit_scan"] = f"{type(exc).__name__}: {gist(exc)}"[:200]
        if call.arg("count"):
            values |= {
                "frames": counter.frame_count,
                "ops": counter.op_count,
                "linears": sum(linear_calls(g) for g in counter.graphs),
                "model_linears": sum(isinstance(m, torch.nn.Linear) for m in fixed.modules()),
                "opaque": sorted({name for g in counter.graphs for name in opaque_ops(g)})[:5],
            }
    return Reply(values, out)


def opaque_ops(graph: torch.fx.GraphModule) -> list[str]:
    """The operators a Dynamo graph calls outside ATen and prims (custom ops: Inductor runs them as they are)."""
    names = []
    for node in graph.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            continue
        name = getattr(target, "_qualified_op_name", None) or f"{target.namespace}::{target._opname}"
        if name.split("::")[0] not in ("aten", "prims"):
            names.append(str(name)[:80])
    return names
