"""coursekit.explain counts every graph break, whichever way torch's explain reports it."""

from __future__ import annotations

import torch

from coursekit.explain import explain_counts


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
