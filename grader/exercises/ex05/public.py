"""Exercise 5, public checks (ship in the learner kit): the ladder and the bisection on the exercise's own
planted bugs, and the fix. The expected answers are where those bugs surface; the fix is compared with the
given GatedMLP run eagerly. The hidden checks (bugs planted in other operators, a real crash in AOTAutograd,
edge inputs for the fix) live in ``hidden.py``.

Every check runs on the CPU: it is about the compiler stack, not speed, and a tiny model keeps each compile
to a second or two.
"""

from __future__ import annotations

from typing import Any

import torch

from coursekit.lessons.debugging.givens import EXERCISE_BUGS, make_input, make_model
from coursekit.lessons.debugging.material import LADDER, Bug
from grader.exercises.ex05.probes import DEVICE, FIX_HINT, at_break_points
from grader.judging import assert_close, assert_consistent
from grader.protocol import Answer
from grader.registry import Measured, check

WRONG_DECOMPOSITION, CRASHING_LOWERING, WRONG_BACKWARD = EXERCISE_BUGS
LADDER_TEXT = " -> ".join(LADDER)
LADDER_HINT = (
    f"Try the backends in order, {LADDER_TEXT}, each after torch.compiler.reset(), compare each "
    "output with the eager one within a tolerance, count an exception as a failure, and return the "
    "first backend that fails (None if none does)."
)
CULPRIT_HINT = (
    "Call CompilerBisector.do_bisect(test) with a test() that runs torch.compiler.reset(), compiles fn "
    "with torch.compile (the bisector picks the backend) and returns True when the output matches eager and, "
    "where parameters require grad, so do their gradients (False on a mismatch or an exception); return "
    "(result.backend, result.subsystem, the operator named in result.debug_info), or None when do_bisect "
    "returns None."
)
GRADIENT_HINT = (
    "The parameters require grad there, and the planted bug is in a backward: the outputs are right, the "
    "gradients are not. Make test() also compare the gradients of the output's sum with respect to those "
    "parameters (torch.autograd.grad, or backward with the gradients cleared before each run) with eager's."
)


def _bugs(bugs: tuple[Bug, ...]) -> list[list[str]]:
    return [[b.kind, b.op] for b in bugs]


def expect_backend(learner, subject: dict, bugs: tuple[Bug, ...], expected: str | None, case: str) -> None:
    """``first_failing_backend`` with ``bugs`` planted must return ``expected``."""
    got = learner.ask("ex05.ladder", {"subject": subject, "bugs": _bugs(bugs), "case": case})
    answer = got.values.get("answer")
    if answer == expected and (answer is None or got.values.get("type") == "str"):
        return
    if got.values.get("type") not in ("str", "NoneType"):
        raise AssertionError(
            f"first_failing_backend returned {str(answer)[:100]} on {case}; expected a backend name or None"
        )
    if expected is None:
        why = (
            f"nothing is broken there, but your ladder says {answer!r} fails. Compiled code is not bit-identical "
            "to eager (decompositions and generated kernels round differently): compare with a tolerance, "
            "e.g. torch.allclose(out, expected, rtol=1e-3, atol=1e-4), not torch.equal or ==."
            if answer in LADDER
            else f"expected None, got {str(answer)[:60]!r}."
        )
    elif answer is None:
        why = (
            f"the {expected} rung fails there, but your ladder reports no failure. Check that every backend is "
            "tried, that a mismatch counts as a failure, and that you return the first failing backend."
        )
    elif answer in LADDER and LADDER.index(answer) < LADDER.index(expected):
        why = (
            f"the first failing backend is {expected!r}, but your ladder says {answer!r}, a rung that works there. "
            "Compiled code is not bit-identical to eager: compare with a tolerance, and call "
            "torch.compiler.reset() before each backend."
        )
    elif expected == "aot_eager_decomp_partition" and answer == "inductor":
        why = (
            "the failure appears already at aot_eager_decomp_partition, but your ladder says inductor: is that "
            "rung missing? It separates Inductor's decompositions (applied by AOTAutograd) from Inductor itself."
        )
    else:
        why = f"the first failing backend is {expected!r}, your ladder says {str(answer)[:60]!r}."
    if answer == LADDER[0]:
        why += EAGER_FAILS
    raise AssertionError(f"first_failing_backend on {case}: {why} {LADDER_HINT}")


# a blind learner, session 36: a constant the grader had not loaded raised a NameError inside the ladder's
# ``except Exception``, every rung "failed", and the message spoke only of tolerances
EAGER_FAILS = (
    " The eager rung runs your function as ordinary PyTorch, with no compiler layer to blame: when it fails, the "
    "error is almost always in your own code (a typo, or a name the grader did not load), caught by your "
    "`except Exception`. Print the exception you catch and run this check's cell in your notebook: after a failed "
    "check it shows what your code printed (`make check` and the grader show only the verdict)."
)


def normalise_op(op: Any) -> Any:
    return op.strip().removeprefix("aten.").split(".")[0] if isinstance(op, str) else op


def expect_culprit(
    learner, subject: dict, bugs: tuple[Bug, ...], expected: tuple[str, str | None, str | None] | None, case: str
) -> None:
    """``find_culprit`` with ``bugs`` planted must name ``expected`` (backend, subsystem, operator)."""
    got = learner.ask("ex05.culprit", {"subject": subject, "bugs": _bugs(bugs), "case": case})
    answer = got.values.get("answer")
    if expected is None:
        if answer is not None:
            raise AssertionError(
                f"find_culprit on {case}: nothing is broken there, but you returned "
                f"{str(answer)[:100]}; return None when CompilerBisector.do_bisect returns None. "
                "Compare outputs and gradients with a tolerance (compiled code is not bit-identical to eager), "
                "and compute each run's gradients afresh (gradients left in .grad add up). " + CULPRIT_HINT
            )
        return
    if answer is None and subject.get("grad"):
        raise AssertionError(f"find_culprit on {case} returned None, but a bug is planted. {GRADIENT_HINT}")
    if got.values.get("malformed") or not (isinstance(answer, list) and len(answer) == 3):
        raise AssertionError(
            f"find_culprit on {case} returned {str(answer)[:100]}; expected a tuple (backend, "
            "subsystem, op). " + CULPRIT_HINT
        )
    backend, subsystem, op = answer
    want_backend, want_subsystem, want_op = expected
    if backend != want_backend:
        raise AssertionError(
            f"find_culprit on {case}: backend {str(backend)[:60]!r}, but the first backend that "
            f"fails there is {want_backend!r}. {CULPRIT_HINT}"
        )
    if subsystem != want_subsystem:
        extra = (
            " A subsystem of None after the right backend usually means the bisector's runs did not really "
            "recompile: call torch.compiler.reset() at the start of each run, or Dynamo reuses the code it "
            "compiled before and nothing the bisector switches off makes a difference."
            if subsystem is None
            else ""
        )
        raise AssertionError(
            f"find_culprit on {case}: subsystem {str(subsystem)[:60]!r}, expected "
            f"{want_subsystem!r}.{extra} " + CULPRIT_HINT
        )
    if normalise_op(op) != want_op:
        raise AssertionError(
            f"find_culprit on {case}: operator {str(op)[:80]!r}, expected the one the bisector names "
            f"in debug_info, reduced to its ATen name (e.g. 'hardtanh' from \"<OpOverload(op='aten."
            f"hardtanh', overload='default')>\", 'cos' from a graph node 'cos_2')."
        )


@check("ex05.ladder.given", kind="correctness", points=2, needs=("first_failing_backend",), public=True)
def ladder_given(learner, ctx) -> None:
    """first_failing_backend names the first failing rung of the exercise's model: none without bugs, then each
    planted bug's rung."""
    subject = {"model": "gated", "seed": 0}
    expect_backend(learner, subject, (), None, "GatedMLP with no planted bug")
    expect_backend(
        learner, subject, EXERCISE_BUGS, "aot_eager_decomp_partition", "GatedMLP with the exercise's bugs planted"
    )
    expect_backend(
        learner, subject, (CRASHING_LOWERING,), "inductor", "GatedMLP with only the exercise's crash planted"
    )


@check("ex05.culprit.given", kind="correctness", points=2, needs=("find_culprit",), public=True)
def culprit_given(learner, ctx) -> None:
    """find_culprit bisects each of the exercise's planted bugs to its backend, subsystem and operator, the one
    that only breaks gradients included."""
    subject = {"model": "gated", "seed": 1}
    expect_culprit(
        learner,
        subject,
        EXERCISE_BUGS,
        ("aot_eager_decomp_partition", "decomposition", "hardswish"),
        "GatedMLP (frozen) with the exercise's bugs planted",
    )
    expect_culprit(
        learner,
        subject,
        (CRASHING_LOWERING,),
        ("inductor", "lowerings", "sigmoid"),
        "GatedMLP with only the exercise's crash planted",
    )
    expect_culprit(
        learner,
        subject | {"grad": True},
        (WRONG_BACKWARD,),
        ("aot_eager_decomp_partition", "decomposition", WRONG_BACKWARD.op),
        "GatedMLP, parameters requiring grad, with only the exercise's third bug planted",
    )


def reference_fb(
    seed: int,
    x: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    up_scale: float | None = None,
    break_points: bool = False,
) -> dict[str, torch.Tensor]:
    """The given GatedMLP's output and parameter gradients (of the output's sum) on ``x``."""
    model = make_model(seed, DEVICE).to(dtype)
    if up_scale:
        with torch.no_grad():
            model.up.weight.mul_(up_scale)
    if break_points:
        at_break_points(model)
    out = model(x)
    out.sum().backward()
    return {"out": out.detach(), **{f"grad.{n}": p.grad for n, p in model.named_parameters()}}


def compare_fb(
    got: Answer, prefix: str, want: dict[str, torch.Tensor], dtype: torch.dtype, what: str, hint: str
) -> None:
    assert_close(got.tensor(f"{prefix}.out"), want["out"], dtype, f"{what}: output", hint)
    for name, grad in want.items():
        if name == "out":
            continue
        if f"{prefix}.{name}" not in got.tensors:
            raise AssertionError(f"{what}: no gradient reached {name.removeprefix('grad.')}. {hint}")
        assert_close(
            got.tensor(f"{prefix}.{name}"), grad, dtype, f"{what}: gradient of {name.removeprefix('grad.')}", hint
        )


def ask_fix(
    learner,
    seed: int,
    x: torch.Tensor,
    *,
    compiled: bool,
    count: bool = False,
    dtype: str = "float32",
    up_scale: float | None = None,
    break_points: bool = False,
) -> Answer:
    args = {"seed": seed, "compiled": compiled, "count": count, "dtype": dtype, "up_scale": up_scale}
    return learner.ask("ex05.fix", args | ({"break_points": True} if break_points else {}), {"x": x})


def expect_no_culprits(got: Answer, what: str) -> None:
    """Called once the compiled values matched: none of the planted bugs' operators may be left in the compiled
    graphs, since a planted bug would then have broken those values unless the compiler itself was changed."""
    culprits = got.values.get("culprits") or []
    if culprits:
        raise AssertionError(
            f"{what}: your compiled graphs still call {', '.join(map(str, culprits[:3]))}, which a planted bug "
            "breaks, yet the compiled values came out right: your code must have got around the planted bugs inside "
            "the compiler (its tables, passes or settings) instead of in the model. Fix the model, not the compiler: "
            "the grader's bugs stand for bugs in the torch you ship with, which you cannot patch in place. (A culprit "
            "computed but never used counts too: remove it.) " + FIX_HINT
        )


@check("ex05.fix.values", kind="correctness", points=2, needs=("FixedGatedMLP",), public=True)
def fix_values(learner, ctx) -> None:
    """FixedGatedMLP equals GatedMLP eagerly, and compiled with Inductor while the bugs are planted (outputs and
    gradients)."""
    for seed in (0, 1):
        x = make_input(10 + seed, DEVICE)
        want = reference_fb(seed, x)
        got = ask_fix(learner, seed, x, compiled=True)
        compare_fb(
            got,
            "eager",
            want,
            torch.float32,
            f"FixedGatedMLP (eager, seed {seed}) vs GatedMLP",
            "The fix must not change what the model computes. " + FIX_HINT,
        )
        compare_fb(
            got,
            "compiled",
            want,
            torch.float32,
            f"FixedGatedMLP compiled with Inductor under the planted bugs (seed {seed}) vs eager GatedMLP",
            "A planted bug still reaches your model: run your ladder and find_culprit on FixedGatedMLP, frozen and "
            "with parameters that require grad. " + FIX_HINT,
        )
        expect_no_culprits(got, f"FixedGatedMLP compiled with Inductor under the planted bugs (seed {seed})")


@check("ex05.fix.one_graph", kind="structure", points=2, needs=("FixedGatedMLP",), public=True)
def fix_one_graph(learner, ctx) -> Measured:
    """The fix is minimal: under the planted bugs FixedGatedMLP still compiles as one Inductor graph (no
    torch.compiler.disable, no graph break)."""
    x = make_input(12, DEVICE)
    got = ask_fix(learner, 2, x, compiled=True, count=True)
    own = ask_fix(learner, 2, x, compiled=True)
    assert_consistent(
        got.tensor("compiled.out"),
        own.tensor("compiled.out"),
        "FixedGatedMLP's output while its graphs were counted",
        rtol=1e-4,
        atol=1e-6,
    )
    try:  # wrong values are ex05.fix.values's to report; right ones with a culprit left in the graph are not a fix
        compare_fb(own, "compiled", reference_fb(2, x), torch.float32, "FixedGatedMLP compiled", FIX_HINT)
    except AssertionError:
        pass
    else:
        expect_no_culprits(own, "FixedGatedMLP compiled under the planted bugs")
    frames = got.value("frames", int)
    opaque = got.value("opaque", list)
    if frames == 1 and opaque:
        raise AssertionError(
            f"FixedGatedMLP's graph calls custom operators ({', '.join(map(str, opaque))}): Inductor runs them as "
            "they are, so whatever they call (the culprits too) runs eagerly, outside the compiler. Rewrite the "
            "computation with other PyTorch operators instead. " + FIX_HINT
        )
    linears, model_linears = got.value("linears", int), got.value("model_linears", int)
    if frames == 1 and linears < model_linears:  # red team, session 39: a disabled helper ran the front eagerly
        raise AssertionError(
            f"FixedGatedMLP's one graph calls {linears} of its {model_linears} linear layers: the rest ran eagerly, "
            "before or after the graph (a torch.compiler.disable'd helper?). The fix keeps the whole model in one "
            "Inductor graph. " + FIX_HINT
        )
    if frames == 1:
        return Measured(1, 1, f"one graph, {got.value('ops', int)} operations compiled by Inductor")
    if frames == 0:
        raise AssertionError(
            "Inductor compiled nothing: is forward (or the whole model) wrapped in "
            "torch.compiler.disable? Then the planted bugs are avoided by not compiling at all. " + FIX_HINT
        )
    raise AssertionError(
        f"FixedGatedMLP compiled as {frames} graphs, not one: a graph break splits it "
        "(torch.compiler.disable around the culprits is one). Running a region eagerly is a fine "
        "stop-gap, but the fix asked for here keeps the whole model in one Inductor graph. " + FIX_HINT
    )
