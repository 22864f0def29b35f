"""Exercise 0, hidden checks (instructor only): Python control flow in a captured function; unseen shapes under
every ``dynamic`` setting, counted more than once."""

from __future__ import annotations

import random

import torch

from grader.exercises.ex00.probes import COUNT_HINT, FUNCTIONS
from grader.exercises.ex00.public import captured, counts
from grader.exercises.ex00.reference import compiles_so_far
from grader.registry import Measured, Shortfall, check


@check("ex00.capture.branches", kind="correctness", points=1, needs=("capture_graph",))
def capture_branches(learner, ctx) -> None:
    """capture_graph follows the Python each call ran: a shape test picks the branch, and each call gets its graph.

    A branch on ``x.shape[0]`` is decided while Dynamo traces, so the graph holds one branch only; a second call
    with another size must return that call's graph, runnable on the function's own arguments."""
    rng = random.Random(ctx.secret_seed)
    for rows, present, absent in ((rng.randint(5, 9), "tanh", "sigmoid"), (rng.randint(2, 4), "sigmoid", "tanh")):
        x = torch.randn(rows, rng.randint(2, 6), generator=torch.Generator().manual_seed(ctx.secret_seed + rows))
        captured(
            learner,
            "branchy",
            (x,),
            {present},
            absent,
            f"a function with `if x.shape[0] > 4:` on {rows} rows (the branch Python took: {present})",
        )


def _shape_lists(seed: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """A 1-D stream with a size-1 batch and repeats, and a 2-D stream whose sizes change one dimension at a time."""
    rng = random.Random(seed)
    sizes = rng.sample(range(2, 40), 4)
    one_d = [(sizes[0],), (sizes[0],), (sizes[1],), (1,), (sizes[2],), (sizes[1],), (sizes[3],)]
    rows, cols = rng.sample(range(2, 12), 2)
    two_d = [(rows, cols), (rows, cols + 3), (rows + 2, cols + 3), (rows + 2, cols + 3), (rows, cols + 1)]
    return one_d, two_d


@check("ex00.recompiles.unseen", kind="structure", points=2, needs=("count_compiles",))
def recompiles_unseen(learner, ctx) -> Measured:
    """count_compiles matches the grader's own count on unseen shapes for dynamic=False, None and True, twice over.

    The first case is asked again last: compiled versions left over from earlier counts must not change it."""
    one_d, two_d = _shape_lists(ctx.secret_seed)
    cases = [(False, one_d), (None, one_d), (True, one_d), (None, two_d), (False, one_d)]  # the first comes back
    got = counts(learner, [("wide", shapes, dynamic) for dynamic, shapes in cases])  # all of yours, back to back
    want = [compiles_so_far(FUNCTIONS["wide"], shapes, dynamic) for dynamic, shapes in cases]
    if got[0] == want[0] and got[-1] != want[-1]:
        raise Shortfall(
            f"the same count asked again (shapes {one_d}, dynamic=False) gave {got[-1]}, the first time "
            f"{got[0]} (right). Something carried over between calls: compiled versions stay attached "
            "to the function's code object, and all of them count towards "
            "torch._dynamo.config.recompile_limit (8), after which Dynamo silently runs the function "
            "eagerly. Call torch.compiler.reset() before counting.",
            measured=got[-1][-1],
            required=want[-1][-1],
        )
    for (dynamic, shapes), g, w in zip(cases, got, want):
        if g == w:
            continue
        hint = {
            False: "one graph per distinct shape",
            None: "the default: static shapes first, then after a size changes one more compile with that "
            "dimension symbolic (automatic dynamic), and sizes 0 and 1 still get graphs of their own",
            True: "symbolic sizes from the first call, except sizes 0 and 1, which Dynamo specialises",
        }[dynamic]
        raise Shortfall(
            f"shapes {shapes} with dynamic={dynamic}: your compiles so far are {g}, the grader counts "
            f"{w} ({hint}). {COUNT_HINT}",
            measured=g[-1],
            required=w[-1],
        )
    return Measured(want[1][-1], want[1][-1], f"{len(cases)} counts agree, e.g. dynamic=None on {one_d}: {want[1]}")
