"""coursekit.explain counts every graph break, whichever way torch's explain reports it."""

from __future__ import annotations

import torch

from coursekit.explain import SKIPPED, explain_counts


def rescale_if_long(x: torch.Tensor) -> torch.Tensor:
    if x.norm() > 4.0:  # a branch on a tensor's value: a graph break
        return x * (4.0 / x.norm())
    return x  # the side taken below: no operation after the break


def test_a_break_before_an_empty_resumption_is_counted() -> None:
    """torch 2.14's explain lists this break's reason with graph_break_count 0; the kit counts it."""
    torch.compiler.reset()
    counts = explain_counts(rescale_if_long, torch.full((16,), 0.01))
    assert counts["breaks"] >= 1 and counts["reasons"], counts
    assert "generic_jump" in counts["reasons"][0], counts["reasons"]


def double_and_log(x: torch.Tensor) -> torch.Tensor:
    for step in range(3):
        x = x * 2
        print(f"step {step}")  # a break inside a loop: Dynamo skips the whole function
    return x


def test_a_function_dynamo_skipped_whole_is_not_reported_clean() -> None:
    """torch's explain reports a break inside a loop as 0 graphs, -1 breaks and no reason; the kit reports it as a
    break whose reason says the function ran eagerly."""
    torch.compiler.reset()
    counts = explain_counts(double_and_log, torch.ones(3))
    assert counts == {"graphs": 0, "breaks": 1, "reasons": [SKIPPED]}, counts
