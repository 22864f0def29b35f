"""Exercise 5, hidden checks: bugs planted in operators the notebook never shows, a real crash in
AOTAutograd, and edge inputs for the fix.

Which operators get a planted bug is drawn from the pools below with the secret seed, so a ladder or a
bisection that hard-codes the exercise's answers fails here. Every pool entry is checked by
``tests/test_debugging.py`` to fail at the rung and in the subsystem the checks expect.
"""

from __future__ import annotations

import random
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.debugging import Bug, TinyDistiller, lesson_input
from coursekit.ex05 import make_input
from grader.checks.ex05_public import (DEVICE, FIX_HINT, compare_outputs, compiled_under_bugs, expect_backend,
                                       expect_culprit, fixed_model, forward_backward)
from grader.registry import check, in_report_order

# operators Inductor decomposes (a planted bug shows from aot_eager_decomp_partition on) ...
DECOMPOSED = {"elu": F.elu, "softplus": F.softplus, "mish": F.mish, "leaky_relu": partial(F.leaky_relu, negative_slope=0.1),
              "hardsigmoid": F.hardsigmoid, "silu": F.silu, "celu": F.celu}
# ... and operators it lowers as they are (a planted bug shows only with inductor)
LOWERED = {"exp": torch.exp, "sin": torch.sin, "cos": torch.cos, "atan": torch.atan, "expm1": torch.expm1,
           "erf": torch.erf, "sinh": torch.sinh, "cosh": torch.cosh, "abs": torch.abs}
OPS = {**DECOMPOSED, **LOWERED}
DECOMPOSITION = "aot_eager_decomp_partition"


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


def probe(op: str, decoy: str, seed: int) -> tuple[Probe, tuple[torch.Tensor]]:
    """A frozen ``Probe`` with seeded weights and its input."""
    torch.manual_seed(seed)
    return Probe(op, decoy).to(DEVICE).requires_grad_(False), (make_input(seed, DEVICE, scale=1.0),)


def drawn(ctx) -> tuple[list[str], list[str]]:
    """Three decomposed and three lowered operators, drawn with the secret seed."""
    rng = random.Random(ctx.secret_seed)
    return rng.sample(sorted(DECOMPOSED), 3), rng.sample(sorted(LOWERED), 3)


def hidden_cases(ctx, which: str) -> list[tuple[str, str, tuple[Bug, ...], str | None]]:
    """``(op, decoy, bugs, expected first failing backend)`` for the ladder or the culprit check."""
    (d1, d2, d3), (l1, l2, l3) = drawn(ctx)
    if which == "ladder":
        return [(d1, l3, (Bug("wrong_decomposition", d1),), DECOMPOSITION),
                (l1, d3, (Bug("crashing_lowering", l1),), "inductor"),
                (l2, d2, (Bug("wrong_lowering", l2),), "inductor"),
                (d2, l1, (Bug("crashing_decomposition", d2),), DECOMPOSITION),
                (d3, l2, (), None)]
    return [(d3, l1, (Bug("wrong_decomposition", d3),), DECOMPOSITION),
            (l2, d1, (Bug("crashing_lowering", l2),), "inductor"),
            (l3, d2, (Bug("wrong_lowering", l3),), "inductor"),
            (d1, l3, (Bug("crashing_decomposition", d1),), DECOMPOSITION),
            (l1, d2, (), None)]


def case_name(op: str, decoy: str, bugs: tuple[Bug, ...]) -> str:
    planted = f"a {bugs[0]} planted by the grader" if bugs else "no planted bug"
    return f"a model using {op} and {decoy}, with {planted}"


@check("ex05.ladder.hidden", kind="correctness", points=3, needs=("first_failing_backend",))
def ladder_hidden(sub, ctx) -> None:
    """first_failing_backend finds the first failing rung for bugs planted in other operators, and none where
    nothing is broken."""
    for i, (op, decoy, bugs, expected) in enumerate(hidden_cases(ctx, "ladder")):
        model, args = probe(op, decoy, ctx.secret_seed % 1000 + i)
        expect_backend(sub, model, args, bugs, expected, case_name(op, decoy, bugs))


@check("ex05.ladder.inference_mode", kind="correctness", points=1, needs=("first_failing_backend",))
def ladder_inference_mode(sub, ctx) -> None:
    """first_failing_backend reports aot_eager for a real failure: a frozen teacher under torch.inference_mode()
    inside a training graph (and nothing for the same model under torch.no_grad())."""
    x = lesson_input(ctx.secret_seed % 1000, DEVICE, batch=3, tokens=5, dim=24)
    for mode, expected in (("no_grad", None), ("inference_mode", "aot_eager")):
        torch.manual_seed(ctx.secret_seed % 1000)
        model = TinyDistiller(mode, dim=24, classes=6).to(DEVICE)
        expect_backend(sub, model, (x,), (), expected, f"a student/teacher loss with the teacher under torch.{mode}()")


@check("ex05.culprit.hidden", kind="correctness", points=3, needs=("find_culprit",))
def culprit_hidden(sub, ctx) -> None:
    """find_culprit names backend, subsystem and operator for bugs planted in operators the notebook never
    shows, and None where nothing is broken."""
    for i, (op, decoy, bugs, backend) in enumerate(hidden_cases(ctx, "culprit")):
        model, args = probe(op, decoy, ctx.secret_seed % 1000 + 10 + i)
        subsystem = {DECOMPOSITION: "decomposition", "inductor": "lowerings"}.get(backend)
        expected = (backend, subsystem, bugs[0].op) if bugs else None
        expect_culprit(sub, model, args, bugs, expected, case_name(op, decoy, bugs))


@check("ex05.fix.edge", kind="correctness", points=1, needs=("FixedGatedMLP",))
def fix_edge(sub, ctx) -> None:
    """FixedGatedMLP matches GatedMLP in float64 and on saturating inputs, eagerly and compiled under the bugs."""
    seed = ctx.secret_seed % 1000 + 20
    hint = ("Both rewritten operations must equal the originals everywhere: check very negative, near-zero and "
            "very positive inputs (a piecewise function has a value on each piece). " + FIX_HINT)
    for dtype in (torch.float64, torch.float32):
        fixed, reference = fixed_model(sub, seed, dtype)
        with torch.no_grad():
            for model in (fixed, reference):
                model.up.weight.mul_(4.0)  # pre-activations far into every regime
        x = make_input(seed, DEVICE, scale=5.0, dtype=dtype)
        want = forward_backward(reference, reference, x)
        compare_outputs(forward_backward(fixed, fixed, x), want, dtype,
                        f"FixedGatedMLP vs GatedMLP, eager, {str(dtype).removeprefix('torch.')}, saturating inputs", hint)
        if dtype == torch.float32:
            compare_outputs(compiled_under_bugs(sub, fixed, x), want, dtype,
                            "FixedGatedMLP compiled under the planted bugs, saturating inputs", hint)


# Report rows follow the notebook: public checks first, as the tasks come.
ORDER = ("ex05.ladder.given", "ex05.ladder.hidden", "ex05.ladder.inference_mode", "ex05.culprit.given",
         "ex05.culprit.hidden", "ex05.fix.values", "ex05.fix.one_graph", "ex05.fix.edge")


in_report_order(ORDER)
