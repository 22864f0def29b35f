"""Exercise 0, hidden checks (instructor only): Python control flow in a captured function; unseen calls (sizes,
dtypes, requires_grad, Python numbers) under every ``dynamic`` setting, counted more than once."""

from __future__ import annotations

import random

import torch

from grader.exercises.ex00.probes import COUNT_HINT, FUNCTIONS
from grader.exercises.ex00.public import Arg, captured, counts, describe_calls, number, tensor
from grader.exercises.ex00.reference import compiles_after_each_call
from grader.registry import Measured, Shortfall, check


@check("ex00.capture.branches", kind="correctness", points=1, needs=("capture_graph",))
def capture_branches(learner, ctx) -> None:
    """capture_graph follows the Python each call ran: a shape test picks the branch, and each call gets its graph.

    A branch on ``x.shape[0]`` is decided while Dynamo traces, so the graph holds one branch only; a second call
    with another size must return that call's graph, runnable on the function's own arguments."""
    rng = random.Random(ctx.seed("ex00.branch sizes"))
    for rows, present, absent in ((rng.randint(5, 9), "tanh", "sigmoid"), (rng.randint(2, 4), "sigmoid", "tanh")):
        x = torch.randn(
            rows, rng.randint(2, 6), generator=torch.Generator().manual_seed(ctx.seed("ex00.branch inputs", rows))
        )
        captured(
            learner,
            "branchy",
            (x,),
            {present},
            absent,
            f"a function with `if x.shape[0] > 4:` on {rows} rows (the branch Python took: {present})",
        )


def _call_lists(seed: int) -> tuple[list[list[Arg]], list[list[Arg]]]:
    """A 1-D stream in which the size changes twice, then the dtype, the integer (twice) and requires_grad, ending on
    a repeat; and a 2-D stream whose sizes change one dimension at a time, with a size-1 batch, a bfloat16 call and
    a float where an int was. At most seven distinct calls each, under the recompile limit (8) with
    ``dynamic=False``."""
    rng = random.Random(seed)
    a, b, c = rng.sample(range(2, 40), 3)
    n1, n2, n3 = rng.sample(range(2, 10), 3)
    one_d = [
        [tensor(a), number(n1)],
        [tensor(a), number(n1)],
        [tensor(b), number(n1)],
        [tensor(c), number(n1)],
        [tensor(a, dtype="float64"), number(n1)],
        [tensor(a), number(n2)],
        [tensor(a), number(n3)],
        [tensor(a, grad=True), number(n2)],
        [tensor(b), number(n1)],
    ]
    rows, cols = rng.sample(range(2, 12), 2)
    two_d = [
        [tensor(rows, cols), number(n1)],
        [tensor(rows, cols + 3), number(n1)],
        [tensor(rows + 2, cols + 3), number(n2)],
        [tensor(rows + 2, cols + 3), number(n2)],
        [tensor(1, cols), number(n2)],
        [tensor(rows, cols + 1, dtype="bfloat16"), number(n2)],
        [tensor(rows, cols), number(rng.choice([0.5, 1.5, 2.5]))],
    ]
    return one_d, two_d


@check("ex00.recompiles.unseen", kind="structure", points=2, needs=("count_compiles",))
def recompiles_unseen(learner, ctx) -> Measured:
    """count_compiles matches the grader's own count on unseen calls for dynamic=False, None and True, twice over.

    The calls change sizes, dtypes, requires_grad and Python numbers. The first case is asked again last: compiled
    versions left over from earlier counts must not change it."""
    one_d, two_d = _call_lists(ctx.seed("ex00.recompile calls"))
    cases = [(False, one_d), (None, one_d), (True, one_d), (None, two_d), (False, one_d)]  # the first comes back
    got = counts(learner, [("centred", calls, dynamic) for dynamic, calls in cases])  # all of yours, back to back
    want = [compiles_after_each_call(FUNCTIONS["centred"], calls, dynamic) for dynamic, calls in cases]
    if got[0] == want[0] and got[-1] != want[-1]:
        raise Shortfall(
            f"the same count asked again (calls {describe_calls(one_d)}, dynamic=False) gave {got[-1]}, the "
            f"first time {got[0]} (right). Something carried over between calls: compiled versions stay "
            "attached to the function's code object, and all of them count towards "
            f"torch._dynamo.config.recompile_limit ({torch._dynamo.config.recompile_limit}), after which Dynamo "
            "runs the function eagerly, with one warning. Call torch.compiler.reset() before counting.",
            measured=got[-1][-1],
            required=want[-1][-1],
        )
    for (dynamic, calls), g, w in zip(cases, got, want):
        if g == w:
            continue
        hint = {
            False: "one graph per distinct combination of shapes, dtypes, requires_grad and numbers",
            None: "the default: static first; after a size or an integer changes, one more compile with it "
            "symbolic (automatic dynamic); sizes 0 and 1, a new dtype, requires_grad, or a float where an "
            "int was, still get graphs of their own",
            True: "sizes and integers symbolic from the first call, except sizes 0 and 1, which Dynamo "
            "specialises; a new dtype, requires_grad, or a float where an int was still compile again",
        }[dynamic]
        raise Shortfall(
            f"calls {describe_calls(calls)} of `(x - x.mean()) * k` with dynamic={dynamic}: your compiles so "
            f"far are {g}, the grader counts {w} ({hint}). {COUNT_HINT}",
            measured=g[-1],
            required=w[-1],
        )
    return Measured(
        want[1][-1], want[1][-1], f"{len(cases)} counts agree, e.g. dynamic=None on {describe_calls(one_d)}: {want[1]}"
    )
