"""``coursekit.peak_memory.peak_bytes`` on the CPU: the highest running total of one call's allocations."""

from __future__ import annotations

import torch

from coursekit.peak_memory import MIB, peak_bytes

FOUR_MIB = 1024 * 1024  # float32 elements


def test_peak_counts_what_is_alive_at_once_not_what_was_allocated_in_all() -> None:
    def one_at_a_time() -> None:
        for _ in range(3):
            torch.ones(FOUR_MIB)  # freed before the next is made

    def three_at_once() -> list[torch.Tensor]:
        return [torch.ones(FOUR_MIB) for _ in range(3)]

    alone, together = peak_bytes(one_at_a_time, "cpu") / MIB, peak_bytes(three_at_once, "cpu") / MIB
    assert 4 <= alone < 5, f"one 4 MiB buffer at a time peaked at {alone:.2f} MiB"
    assert 12 <= together < 13, f"three live 4 MiB buffers peaked at {together:.2f} MiB"


def test_peak_sees_what_a_compiled_function_allocates() -> None:
    x = torch.randn(FOUR_MIB)
    double = torch.compile(lambda t: (t * 2).sin(), backend="inductor")
    double(x)
    assert 4 <= peak_bytes(lambda: double(x), "cpu") / MIB < 5
