"""A timed sample must run its work in compiled graphs: a function compiled for the calls before timing and eager
while timed is caught (red team, session 37)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grader.probing import compiled_work, graph_runs, linear_calls
from grader.speed import check_work


def test_compiled_work_counts_each_call_of_a_graph_by_its_weight() -> None:
    torch.compiler.reset()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    counter = graph_runs("eager", detail=False)
    compiled = torch.compile(model, backend=counter)
    work = compiled_work(counter, linear_calls)
    x = torch.randn(3, 4)
    compiled(x)
    assert work() == 2  # one call of a graph that holds two linear layers
    before = work()
    for _ in range(3):
        compiled(x)
    assert work() - before == 6
    for _ in range(3):  # the same model, eagerly: no compiled work
        model(x)
    assert work() - before == 6
    torch.compiler.reset()


def test_a_sample_short_of_compiled_work_fails_with_what_to_fix() -> None:
    check_work(44, 2, 22, "linear layers")
    with pytest.raises(AssertionError, match="ran 22 linear layers, where each call runs 22 .44 in all.: part of"):
        check_work(22, 2, 22, "linear layers")
    with pytest.raises(AssertionError, match="call the compiled function on every call"):
        check_work(0, 16, 1, "calls of a graph that holds the loss")
