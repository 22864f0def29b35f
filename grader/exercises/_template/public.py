"""Exercise NN's public checks (ship in the kit): compare with the exercise's givens, never with a solution."""

from __future__ import annotations

import torch

from grader.judging import assert_close
from grader.registry import check


@check("ex99.double.values", kind="correctness", points=1, needs=("double",), public=True)
def double_values(learner, ctx) -> None:
    """double(x) is x times two."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(ctx.seed("ex99.double inputs")))
    got = learner.ask("ex99.double", {}, {"x": x}).tensor("out", shape=tuple(x.shape))
    assert_close(got, x * 2, torch.float32, "double(x)", "Multiply by two; keep the shape and dtype.")
