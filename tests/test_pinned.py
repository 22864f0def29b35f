"""The settings every probe runs under (``grader.pinned``): what moved is named, precision before stance, and
``restore`` sets both back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from grader.pinned import Pinned


@pytest.fixture
def pinned() -> Iterator[Pinned]:
    before = Pinned.now()
    before.restore()
    yield before
    before.restore()


def test_nothing_moved_says_nothing(pinned: Pinned) -> None:
    assert pinned.moved() is None and pinned.loaded() is None


def test_precision_and_stance_are_named_and_set_back(pinned: Pinned) -> None:
    torch.set_float32_matmul_precision("medium")
    torch.compiler.set_stance("eager_on_recompile")
    first = pinned.moved()
    assert first is not None and "float32 precision" in first and "bf16" in first
    assert "float32 precision" in (pinned.loaded() or "")
    pinned.restore()
    assert pinned.moved() is None
    torch.compiler.set_stance("eager_on_recompile")
    second = pinned.moved()
    assert second is not None and "stance" in second and "eager_on_recompile" in second
    assert pinned.loaded() is None  # a load note names precision switches only: the stance is set back silently
    pinned.restore()
    assert pinned.moved() is None
