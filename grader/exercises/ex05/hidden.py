"""Exercise 5, hidden checks (instructor only): bugs planted in operators the notebook never shows (one of them
only in a backward), a real crash in AOTAutograd, and edge inputs for the fix.

Which operators get a planted bug is drawn from the pools in ``probes.py`` with the secret seed, so a ladder or
a bisection that hard-codes the exercise's answers fails here. Every pool entry is checked by
``tests/test_debugging.py`` to fail at the rung and in the subsystem the checks expect.
"""

from __future__ import annotations

import random

import torch

from coursekit.lessons.debugging.givens import make_input
from coursekit.lessons.debugging.material import Bug
from grader.exercises.ex05.probes import BACKWARD, DECOMPOSED, DEVICE, FIX_HINT, LOWERED
from grader.exercises.ex05.public import (
    ask_fix,
    compare_fb,
    expect_backend,
    expect_culprit,
    expect_no_culprits,
    reference_fb,
)
from grader.registry import check

DECOMPOSITION = "aot_eager_decomp_partition"


def drawn(ctx) -> tuple[list[str], list[str]]:
    """Three decomposed and three lowered operators, drawn with the secret seed."""
    rng = random.Random(ctx.seed("ex05.drawn operators"))
    return rng.sample(sorted(DECOMPOSED), 3), rng.sample(sorted(LOWERED), 3)


def drawn_backward(ctx) -> str:
    """One backward operator (a key of ``BACKWARD``), drawn with the secret seed."""
    return random.Random(ctx.seed("ex05.drawn backward")).choice(sorted(BACKWARD))


def hidden_cases(ctx, which: str) -> list[tuple[str, str, tuple[Bug, ...], str | None, bool]]:
    """``(op, decoy, bugs, expected first failing backend, parameters require grad)`` for the ladder or the
    culprit check. The ladder compares outputs, so its models are frozen; the culprit check adds a bug that
    only a training graph shows, and a training graph with nothing broken.

    A ladder model holds one decomposed and one lowered operator; a culprit model with a bug holds two of the
    broken operator's kind (two that Inductor decomposes, or two it lowers), so the rung that fails cannot name the
    operator without the bisector (red team, session 35: the rung plus Inductor's decomposition table took all 5
    culprit points). The secret seed decides which operators, which of the two carries the bug, in which of the
    model's two places each sits, and the order of the cases: a rule over the model's attributes (the bug is in
    ``op``; every third case is clean) cannot stand in for running the ladder (red team, session 19: such a rule
    took all 7 hidden points)."""
    (d1, d2, d3), (l1, l2, l3) = drawn(ctx)
    rng = random.Random(ctx.seed(f"ex05.{which} cases"))

    def case(broken: str, other: str, kind: str, grad: bool = False, bug_op: str | None = None):
        bugs = (Bug(kind, bug_op or broken),) if kind else ()
        backend = (DECOMPOSITION if kind.endswith("decomposition") else "inductor") if kind else None
        op, decoy = (broken, other) if rng.random() < 0.5 else (other, broken)
        return op, decoy, bugs, backend, grad

    pairs = [(d1, l3), (l1, d3), (l2, d2), (d2, l1)]  # (decomposed, lowered) or (lowered, decomposed)
    if which == "ladder":
        kinds = ["wrong_decomposition", "crashing_lowering", "wrong_lowering", "crashing_decomposition"]
        cases = [case(a, b, k) if _pool(a, k) else case(b, a, k) for (a, b), k in zip(pairs, kinds)]
        cases.append(case(d3, l2, ""))
    else:  # the broken operator beside one of its own kind: the failing rung alone cannot name it
        backward = drawn_backward(ctx)
        forward = BACKWARD[backward]
        pairs = [(d3, d1), (l2, l1), (l3, l2), (d1, d2)]
        kinds = ["wrong_decomposition", "crashing_lowering", "wrong_lowering", "crashing_decomposition"]
        cases = [case(a, b, k) for (a, b), k in zip(pairs, kinds)]
        other = next(d for d in (d2, d3, d1) if d != forward)
        cases.append(case(forward, other, "wrong_decomposition", grad=True, bug_op=backward))
        cases.append(case(l1, d2, "", grad=True))
    rng.shuffle(cases)
    return cases


def _pool(op: str, kind: str) -> bool:
    """Whether a bug of ``kind`` (``..._decomposition`` or ``..._lowering``) can be planted in ``op``."""
    return op in (DECOMPOSED if kind.endswith("decomposition") else LOWERED)


def case_name(op: str, decoy: str, bugs: tuple[Bug, ...], grad: bool = False) -> str:
    planted = f"a {bugs[0]} planted by the grader" if bugs else "no planted bug"
    training = ", parameters requiring grad" if grad else ""
    return f"a model using {op} and {decoy}{training}, with {planted}"


@check("ex05.ladder.hidden", kind="correctness", points=3, needs=("first_failing_backend",))
def ladder_hidden(learner, ctx) -> None:
    """first_failing_backend finds the first failing rung for bugs planted in other operators, and none where
    nothing is broken."""
    for i, (op, decoy, bugs, expected, _) in enumerate(hidden_cases(ctx, "ladder")):
        subject = {"model": "probe", "op": op, "decoy": decoy, "seed": ctx.seed("ex05.ladder models", i) % 1000}
        expect_backend(learner, subject, bugs, expected, case_name(op, decoy, bugs))


@check("ex05.ladder.inference_mode", kind="correctness", points=1, needs=("first_failing_backend",))
def ladder_inference_mode(learner, ctx) -> None:
    """first_failing_backend reports aot_eager for a real failure: a frozen teacher under torch.inference_mode()
    inside a training graph (and nothing for the same model under torch.no_grad())."""
    for mode, expected in (("no_grad", None), ("inference_mode", "aot_eager")):
        subject = {"model": "distiller", "mode": mode, "seed": ctx.seed("ex05.distiller model") % 1000}
        expect_backend(learner, subject, (), expected, f"a student/teacher loss with the teacher under torch.{mode}()")


@check("ex05.culprit.hidden", kind="correctness", points=3, needs=("find_culprit",))
def culprit_hidden(learner, ctx) -> None:
    """find_culprit names backend, subsystem and operator for bugs planted in operators the notebook never
    shows, one of them in a backward, and None where nothing is broken (in a training graph too)."""
    for i, (op, decoy, bugs, backend, grad) in enumerate(hidden_cases(ctx, "culprit")):
        subject = {
            "model": "probe",
            "op": op,
            "decoy": decoy,
            "seed": ctx.seed("ex05.culprit models", i) % 1000,
            "grad": grad,
        }
        subsystem = {DECOMPOSITION: "decomposition", "inductor": "lowerings"}.get(backend)
        expected = (backend, subsystem, bugs[0].op) if bugs else None
        expect_culprit(learner, subject, bugs, expected, case_name(op, decoy, bugs, grad))


@check("ex05.fix.edge", kind="correctness", points=1, needs=("FixedGatedMLP",))
def fix_edge(learner, ctx) -> None:
    """FixedGatedMLP matches GatedMLP in float64 and on saturating inputs, eagerly and compiled under the bugs, and
    eagerly at exact break points (a gate input of exactly 0, for one)."""
    seed = ctx.seed("ex05.fix edge inputs") % 1000
    hint = (
        "Both rewritten operations must equal the originals everywhere: check very negative, near-zero and "
        "very positive inputs (a piecewise function has a value on each piece). " + FIX_HINT
    )
    for dtype in (torch.float64, torch.float32):
        x = make_input(seed, DEVICE, scale=5.0, dtype=dtype)
        want = reference_fb(seed, x, dtype, up_scale=4.0)
        name = str(dtype).removeprefix("torch.")
        got = ask_fix(learner, seed, x, compiled=dtype == torch.float32, dtype=name, up_scale=4.0)
        compare_fb(got, "eager", want, dtype, f"FixedGatedMLP vs GatedMLP, eager, {name}, saturating inputs", hint)
        if dtype == torch.float32:
            compare_fb(
                got, "compiled", want, dtype, "FixedGatedMLP compiled under the planted bugs, saturating inputs", hint
            )
            expect_no_culprits(got, "FixedGatedMLP compiled under the planted bugs, saturating inputs")
    # a gate input of exactly 0: a sigmoid built from exp(-|g|) has the right values and, through abs, a gradient
    # of 0 there instead of 1/4; random inputs never hit it
    x = make_input(seed, DEVICE, dtype=torch.float64)
    want = reference_fb(seed, x, torch.float64, break_points=True)
    got = ask_fix(learner, seed, x, compiled=False, dtype="float64", break_points=True)
    what = "FixedGatedMLP vs GatedMLP, eager, float64, pre-activations at exact points (the gate's input 0 among them)"
    compare_fb(got, "eager", want, torch.float64, what, hint)
