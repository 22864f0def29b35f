"""Exercise 5, public checks: the ones a learner runs inside the exercise notebook.

This module ships in the learner kit (``make release``): the ladder and the bisection on the exercise's
own planted bugs, and the fix. The hidden checks (bugs planted in other operators, a real crash in
AOTAutograd, edge inputs for the fix) live in ``grader.checks.ex05``, which imports from here.

Every check runs on the CPU: it is about the compiler stack, not speed, and a tiny model keeps each
compile to a second or two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from coursekit.debugging import LADDER, Bug, gist, planted, reset_bisector, restore_dispatch_state
from coursekit.ex05 import _EXERCISE_BUGS, GatedMLP, make_input, make_model
from grader.checks.common import assert_close, require_tensor
from grader.registry import Measured, Unsettled, check

DEVICE = "cpu"
WRONG_DECOMPOSITION, CRASHING_LOWERING = _EXERCISE_BUGS
LADDER_TEXT = " -> ".join(LADDER)
LADDER_HINT = (f"Try the backends in order, {LADDER_TEXT}, each after torch.compiler.reset(), compare each "
               "output with the eager one within a tolerance, count an exception as a failure, and return the "
               "first backend that fails (None if none does).")
CULPRIT_HINT = ("Call CompilerBisector.do_bisect(test) with a test() that runs torch.compiler.reset(), compiles fn "
                "with torch.compile (the bisector picks the backend) and returns True when the output matches eager "
                "(False on a mismatch or an exception); return (result.backend, result.subsystem, the operator "
                "named in result.debug_info), or None when do_bisect returns None.")
FIX_HINT = ("Rewrite the two culprit operations in FixedGatedMLP (override activation and gate) with other "
            "operations that compute the same values, so that no planted bug is reached.")


def call_learner(fn: Callable, args: tuple, what: str, hint: str = "") -> Any:
    """``fn(*args)``, with this process left usable afterwards.

    Dispatcher state a crashed compile left behind is put back, and a bisection left half-way is switched
    off. A torch error escaping from learner code becomes ``Unsettled`` (a failure after which the remaining
    checks run in a fresh process); ``NotImplementedError`` and other errors pass through to the grader.
    """
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
    raise Unsettled(failure)


def frozen_model(seed: int) -> GatedMLP:
    """The exercise's model without parameter gradients: an inference graph is all the ladder needs."""
    return make_model(seed, DEVICE).requires_grad_(False)


def expect_backend(sub, fn: nn.Module, args: tuple, bugs: tuple[Bug, ...], expected: str | None, case: str) -> None:
    """``first_failing_backend(fn, args)`` with ``bugs`` planted must return ``expected``."""
    ladder = sub.get("first_failing_backend")
    with planted(*bugs):
        got = call_learner(ladder, (fn, args), f"first_failing_backend on {case}",
                           "A crash inside torch.compile is a failing rung: catch it (except Exception) and "
                           "return that backend.")
    if got == expected:
        return
    if got is not None and not isinstance(got, str):
        raise AssertionError(f"first_failing_backend returned {got!r} on {case}; expected a backend name or None")
    if expected is None:
        why = (f"nothing is broken there, but your ladder says {got!r} fails. Compiled code is not bit-identical "
               "to eager (decompositions and generated kernels round differently): compare with a tolerance, "
               "e.g. torch.allclose(out, expected, rtol=1e-3, atol=1e-4), not torch.equal or ==."
               if got in LADDER else f"expected None, got {got!r}.")
    elif got is None:
        why = (f"the {expected} rung fails there, but your ladder reports no failure. Check that every backend is "
               "tried, that a mismatch counts as a failure, and that you return the first failing backend.")
    elif got in LADDER and LADDER.index(got) < LADDER.index(expected):
        why = (f"the first failing backend is {expected!r}, but your ladder says {got!r}, a rung that works there. "
               "Compiled code is not bit-identical to eager: compare with a tolerance, and call "
               "torch.compiler.reset() before each backend.")
    elif expected == "aot_eager_decomp_partition" and got == "inductor":
        why = ("the failure appears already at aot_eager_decomp_partition, but your ladder says inductor: is that "
               "rung missing? It separates Inductor's decompositions (applied by AOTAutograd) from Inductor itself.")
    else:
        why = f"the first failing backend is {expected!r}, your ladder says {got!r}."
    raise AssertionError(f"first_failing_backend on {case}: {why} {LADDER_HINT}")


def normalise_op(op: Any) -> Any:
    return op.strip().removeprefix("aten.").split(".")[0] if isinstance(op, str) else op


def expect_culprit(sub, fn: nn.Module, args: tuple, bugs: tuple[Bug, ...],
                   expected: tuple[str, str | None, str | None] | None, case: str) -> None:
    """``find_culprit(fn, args)`` with ``bugs`` planted must name ``expected`` (backend, subsystem, operator)."""
    find = sub.get("find_culprit")
    with planted(*bugs):
        got = call_learner(find, (fn, args), f"find_culprit on {case}",
                           "The function you give do_bisect must return False on an exception, not raise it.")
    if expected is None:
        if got is not None:
            raise AssertionError(f"find_culprit on {case}: nothing is broken there, but you returned {got!r}; "
                                 f"return None when CompilerBisector.do_bisect returns None. Compare outputs with a "
                                 f"tolerance: compiled code is not bit-identical to eager. {CULPRIT_HINT}")
        return
    if not (isinstance(got, tuple) and len(got) == 3):
        raise AssertionError(f"find_culprit on {case} returned {got!r}; expected a tuple (backend, subsystem, op). "
                             + CULPRIT_HINT)
    backend, subsystem, op = got
    want_backend, want_subsystem, want_op = expected
    if backend != want_backend:
        raise AssertionError(f"find_culprit on {case}: backend {backend!r}, but the first backend that fails there is "
                             f"{want_backend!r}. {CULPRIT_HINT}")
    if subsystem != want_subsystem:
        extra = (" A subsystem of None after the right backend usually means the bisector's runs did not really "
                 "recompile: call torch.compiler.reset() at the start of each run, or Dynamo reuses the code it "
                 "compiled before and nothing the bisector switches off makes a difference."
                 if subsystem is None else "")
        raise AssertionError(f"find_culprit on {case}: subsystem {subsystem!r}, expected {want_subsystem!r}.{extra} "
                             + CULPRIT_HINT)
    if normalise_op(op) != want_op:
        raise AssertionError(f"find_culprit on {case}: operator {op!r}, expected the one the bisector names in "
                             f"debug_info, reduced to its ATen name (e.g. 'hardtanh' from \"<OpOverload(op='aten."
                             f"hardtanh', overload='default')>\", 'cos' from a graph node 'cos_2').")


@check("ex05.ladder.given", kind="correctness", points=2, needs=("first_failing_backend",), public=True)
def ladder_given(sub, ctx) -> None:
    """first_failing_backend names the first failing rung of the exercise's model: none without bugs, then each
    planted bug's rung."""
    model, x = frozen_model(0), make_input(0, DEVICE)
    expect_backend(sub, model, (x,), (), None, "GatedMLP with no planted bug")
    expect_backend(sub, model, (x,), _EXERCISE_BUGS, "aot_eager_decomp_partition",
                   "GatedMLP with the exercise's two bugs planted")
    expect_backend(sub, model, (x,), (CRASHING_LOWERING,), "inductor",
                   "GatedMLP with only the exercise's crash planted")


@check("ex05.culprit.given", kind="correctness", points=2, needs=("find_culprit",), public=True)
def culprit_given(sub, ctx) -> None:
    """find_culprit bisects each of the exercise's planted bugs to its backend, subsystem and operator."""
    model, x = frozen_model(1), make_input(1, DEVICE)
    expect_culprit(sub, model, (x,), _EXERCISE_BUGS, ("aot_eager_decomp_partition", "decomposition", "hardswish"),
                   "GatedMLP with the exercise's two bugs planted")
    expect_culprit(sub, model, (x,), (CRASHING_LOWERING,), ("inductor", "lowerings", "sigmoid"),
                   "GatedMLP with only the exercise's crash planted")


def fixed_model(sub, seed: int, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, GatedMLP]:
    """The learner's ``FixedGatedMLP`` loaded with the weights of a seeded ``GatedMLP`` (returned too)."""
    factory = sub.get("FixedGatedMLP")
    if not (isinstance(factory, type) and issubclass(factory, GatedMLP)):
        raise AssertionError("FixedGatedMLP must subclass GatedMLP (class FixedGatedMLP(GatedMLP)), so that it keeps "
                             "the layers and the weights of the model it fixes")
    reference = make_model(seed, DEVICE).to(dtype)
    fixed = factory().to(DEVICE, dtype)
    try:
        fixed.load_state_dict(reference.state_dict())
    except RuntimeError as exc:
        raise AssertionError(f"FixedGatedMLP cannot load a GatedMLP's state_dict: {str(exc)[:200]}. Keep the same "
                             "parameters, so trained weights still load into the fixed model.") from None
    return fixed, reference


def forward_backward(model: Callable, module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The output of ``model(x)`` and the gradients of its sum with respect to ``module``'s parameters."""
    module.zero_grad(set_to_none=True)
    out = require_tensor(model(x), "the model's output")
    out.sum().backward()
    return out.detach(), {n: p.grad for n, p in module.named_parameters()}


def compiled_under_bugs(sub, fixed: nn.Module, x: torch.Tensor, backend: Any = "inductor"):
    """Compile ``fixed`` with ``backend`` while the exercise's bugs are planted; output and gradients."""
    with planted(*_EXERCISE_BUGS):
        compiled = torch.compile(fixed, backend=backend)
        return call_learner(forward_backward, (compiled, fixed, x), "torch.compile(FixedGatedMLP) with the planted bugs",
                            "A planted bug still reaches your model: run your ladder and find_culprit on "
                            "FixedGatedMLP. " + FIX_HINT)


def compare_outputs(got: tuple[torch.Tensor, dict], want: tuple[torch.Tensor, dict], dtype: torch.dtype,
                    what: str, hint: str) -> None:
    assert_close(got[0], want[0], dtype, f"{what}: output", hint)
    for name, grad in want[1].items():
        if got[1].get(name) is None:
            raise AssertionError(f"{what}: no gradient reached {name}. {hint}")
        assert_close(got[1][name], grad, dtype, f"{what}: gradient of {name}", hint)


@check("ex05.fix.values", kind="correctness", points=2, needs=("FixedGatedMLP",), public=True)
def fix_values(sub, ctx) -> None:
    """FixedGatedMLP equals GatedMLP eagerly, and compiled with Inductor while the bugs are planted (outputs and
    gradients)."""
    for seed in (0, 1):
        fixed, reference = fixed_model(sub, seed)
        x = make_input(10 + seed, DEVICE)
        want = forward_backward(reference, reference, x)
        compare_outputs(forward_backward(fixed, fixed, x), want, torch.float32,
                        f"FixedGatedMLP (eager, seed {seed}) vs GatedMLP", "The fix must not change what the model "
                        "computes. " + FIX_HINT)
        compare_outputs(compiled_under_bugs(sub, fixed, x), want, torch.float32,
                        f"FixedGatedMLP compiled with Inductor under the planted bugs (seed {seed}) vs eager GatedMLP",
                        "A planted bug still reaches your model: run your ladder and find_culprit on FixedGatedMLP. "
                        + FIX_HINT)


@check("ex05.fix.one_graph", kind="structure", points=2, needs=("FixedGatedMLP",), public=True)
def fix_one_graph(sub, ctx) -> Measured:
    """The fix is minimal: under the planted bugs FixedGatedMLP still compiles as one Inductor graph (no
    torch.compiler.disable, no graph break)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    fixed, _ = fixed_model(sub, 2)
    forward_backward(fixed, fixed, make_input(12, DEVICE))  # eagerly first: a missing piece fails here, plainly
    torch.compiler.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled_under_bugs(sub, fixed, make_input(12, DEVICE), backend=counter)
    if counter.frame_count == 1:
        return Measured(1, 1, f"one graph, {counter.op_count} operations compiled by Inductor")
    if counter.frame_count == 0:
        raise AssertionError("Inductor compiled nothing: is forward (or the whole model) wrapped in "
                             "torch.compiler.disable? Then the planted bugs are avoided by not compiling at all. "
                             + FIX_HINT)
    raise AssertionError(f"FixedGatedMLP compiled as {counter.frame_count} graphs, not one: a graph break splits "
                         "it (torch.compiler.disable around the culprits is one). Running a region eagerly is a fine "
                         "stop-gap, but the fix asked for here keeps the whole model in one Inductor graph. "
                         + FIX_HINT)
