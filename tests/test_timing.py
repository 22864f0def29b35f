"""The timing harness measures what it claims: slower is slower, equal is about equal."""

from __future__ import annotations

import time

import pytest
import torch

from coursekit.timing import compare, time_per_call

pytestmark = pytest.mark.timing


@pytest.fixture(autouse=True)
def one_thread():
    """Time with one CPU thread, as the smoke profile does: idle OpenMP threads on a busy machine
    can stall every op for a scheduler time slice."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _work(x: torch.Tensor) -> torch.Tensor:
    return (x @ x).relu().sum()


def _slowed(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.002)
    return _work(x)


def _args(i: int):
    return (torch.randn(64, 64, generator=torch.Generator().manual_seed(abs(i))),)


def test_slowed_function_measures_slower() -> None:
    result = compare(_slowed, _work, _args, device="cpu", trials=5, min_sample_s=0.02)
    assert result.speedup > 2.0, f"a function with a 2 ms sleep should be much slower: {result}"
    assert result.candidate.median_s < result.baseline.median_s


def test_equal_functions_measure_a_ratio_near_one() -> None:
    result = compare(_work, _work, _args, device="cpu", trials=9, min_sample_s=0.02)
    assert 0.8 < result.speedup < 1.25, f"identical functions should time alike: {result}"


def test_check_is_called_on_every_trial_outside_timing() -> None:
    seen = []
    compare(
        _work, _work, _args, device="cpu", trials=3, min_sample_s=0.001, check=lambda out, args: seen.append(float(out))
    )
    assert len(seen) == 3


def test_time_per_call_scales_with_work() -> None:
    """Per call, not per sample (each sample is at least 10 ms here): a sleep never returns early, so each median is
    at least its sleep, and the 3 ms between them shows. A ratio is the wrong test: a loaded machine adds the same
    overshoot to both sleeps (CI once measured 1.86 ms and 4.37 ms, a ratio of 2.35 but a difference of 2.5 ms)."""
    short = time_per_call(lambda: time.sleep(0.001), lambda i: (), device="cpu", samples=3, min_sample_s=0.01)
    long = time_per_call(lambda: time.sleep(0.004), lambda i: (), device="cpu", samples=3, min_sample_s=0.01)
    assert short.median_s >= 0.001 and long.median_s >= 0.004, (short, long)
    assert long.median_s - short.median_s > 0.002, (short, long)
    assert long.median_s < 0.009, f"a 4 ms call measured like a whole 10 ms sample: {long}"
