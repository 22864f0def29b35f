"""Guards against a fix or an update made outside the compiled graphs, each shown to fail: exercise 5's planted-bug
guard and culprit scan, exercise 6's eager-update and outside-write counts (session 37) and its watch on AdamW's
running averages (session 47)."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from coursekit.lessons.debugging.givens import EXERCISE_BUGS, make_input, make_model
from coursekit.lessons.debugging.material import planted
from grader.exercises.ex05.probes import PlantedGuard, compiler_tables, culprits_in
from grader.exercises.ex05.public import expect_no_culprits
from grader.exercises.ex06.probes import AveragesMoved, OutsideWrites, eager_adam_updates, running_averages
from grader.protocol import Answer


def _graphs(model: nn.Module, x: torch.Tensor) -> list[tuple[torch.fx.GraphModule, list]]:
    graphs: list[tuple[torch.fx.GraphModule, list]] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch.compiler.reset()
    torch.compile(model, backend=keep)(x).sum().backward()
    torch.compiler.reset()
    return graphs


def test_the_culprit_scan_finds_the_planted_operators_in_the_given_model_and_fails_the_check() -> None:
    found = culprits_in(_graphs(make_model(0), make_input(0)), EXERCISE_BUGS)
    assert len(found) == len(EXERCISE_BUGS), found  # hardswish, sigmoid and layer norm's backward
    with pytest.raises(AssertionError, match="Fix the model, not the compiler"):
        expect_no_culprits(Answer("ex05.fix", {"culprits": found}), "FixedGatedMLP")
    expect_no_culprits(Answer("ex05.fix", {"culprits": []}), "FixedGatedMLP")


def test_the_guard_sees_a_planted_entry_put_back_and_skips_a_table_this_torch_lacks() -> None:
    with planted(*EXERCISE_BUGS):
        guard = PlantedGuard(EXERCISE_BUGS)
        guard.check("untouched")
        assert not guard.changed
        bug = EXERCISE_BUGS[0]
        name, table = compiler_tables(bug)[0]
        planted_entry = table()[bug.overload]
        table()[bug.overload] = lambda *args, **kwargs: None  # a learner's "repair"
        try:
            guard.check("after the repair")
        finally:
            table()[bug.overload] = planted_entry
    assert guard.changed and guard.changed[0].startswith(name) and guard.when == "after the repair"
    assert all(not isinstance(entry[3], Exception) for entry in guard.entries)  # missing tables are not guarded


def test_an_update_written_eagerly_beside_a_compiled_graph_counts_as_outside() -> None:
    torch.compiler.reset()
    model = nn.Linear(4, 2)
    backend = OutsideWrites(lambda gm, example_inputs: gm.forward)
    backend.watch(list(model.parameters()))
    touch = torch.compile(lambda ps: [p * 2 for p in ps], backend=backend)
    with torch.no_grad():
        touch(list(model.parameters()))
        backend.settle()
        assert backend.outside == 0
        for p in model.parameters():  # a hand-written update outside any graph
            p.sub_(0.1)
        touch(list(model.parameters()))
        backend.settle()
    assert backend.outside == 1
    torch.compiler.reset()


def test_adamw_stepped_eagerly_is_recorded_and_compiled_is_not() -> None:
    torch.compiler.reset()
    model = nn.Linear(4, 2)
    model(torch.randn(3, 4)).sum().backward()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=False)
    with eager_adam_updates() as eager:
        opt.step()
        assert eager, "an eager AdamW step must be recorded"
        eager.clear()
        torch.compile(opt.step, backend="eager")()
        assert not eager, eager
    adam = importlib.import_module("torch.optim.adam")
    assert adam._single_tensor_adam.__name__ == "_single_tensor_adam"  # the originals are back
    torch.compiler.reset()


def test_adamw_running_averages_must_be_the_same_tensors_and_move_every_step() -> None:
    """Session 47: AdamW by hand into copies, written back by a compiled graph, left the optimizer's own running
    averages missing; a cheat that keeps them must update them in place, as a compiled ``optimizer.step()`` does."""
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    assert running_averages(opt, model) is None  # no step yet: no state
    moved = AveragesMoved()
    assert not moved.step(running_averages(opt, model))
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    averages = running_averages(opt, model)
    assert averages is not None and len(averages) == 2 * len(list(model.parameters()))
    assert moved.step(averages)  # the first look: they exist
    assert not moved.step(averages), "averages left as they were must not count"
    opt.step()
    assert moved.step(running_averages(opt, model))  # updated in place
    for p in model.parameters():  # replaced by new tensors (computed elsewhere), not updated in place
        opt.state[p]["exp_avg"] = opt.state[p]["exp_avg"] * 0.5
    assert not moved.step(running_averages(opt, model))
