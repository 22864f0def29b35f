"""Dynamo's stance while learner code runs (``grader.stance``): a stance left moved, and compiled calls made under
``skip_guard_eval_unsafe`` or a forced backend, are named; the stance is set back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from grader import probing, stance


@pytest.fixture
def pinned() -> Iterator[object]:
    before = stance.current()
    stance.restore(before)
    yield before
    stance.restore(before)


def test_a_stance_left_moved_is_named_and_set_back(pinned: object) -> None:
    torch.compiler.set_stance("eager_on_recompile")
    found = stance.changes(pinned)
    assert found and "eager_on_recompile" in found[0] and "still in force" in found[0]
    stance.restore(pinned)
    assert stance.changes(pinned) == []


def test_compiled_calls_under_an_unsafe_stance_are_noted(pinned: object) -> None:
    """A call counted by the probes' backend under ``skip_guard_eval_unsafe`` is noted, even when the learner's code
    set the stance back before returning."""
    counter = probing.graph_runs("eager", detail=False)
    compiled = torch.compile(lambda x: x + 1, backend=counter)
    compiled(torch.ones(3))
    assert stance.changes(pinned) == []
    with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
        compiled(torch.ones(3))
    found = stance.changes(pinned)
    assert len(found) == 1 and "skip_guard_eval_unsafe=True" in found[0]
    assert "skip_guard_eval_unsafe" in stance.message(found)
    stance.restore(pinned)
    assert stance.changes(pinned) == []


def test_a_forced_backend_is_named(pinned: object) -> None:
    torch.compiler.set_stance("default", force_backend="eager")
    assert any("force_backend" in f for f in stance.changes(pinned))
