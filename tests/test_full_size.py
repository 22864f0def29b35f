"""Full size without a GPU: every lesson's training steps at the ``full`` profile, built on the meta device, run one
forward and backward (shape errors show here, not on a learner's GPU), and their memory matches the manifest."""

from __future__ import annotations

import pytest

from coursekit.lessons import lessons
from coursekit.memory import GIB, estimate, fits, need_gib
from coursekit.profile import get_profile

FULL = get_profile("full", device="cpu")


@pytest.mark.parametrize("item", lessons(), ids=lambda lesson: lesson.topic)
def test_full_size_steps_run_on_meta_and_the_manifest_states_their_memory(item) -> None:
    try:
        sizes = item.module("sizes")
    except ModuleNotFoundError:
        assert item.full_memory_gib == 0, f"{item.topic}: full_memory_gib without a sizes.py to back it"
        return
    estimates = [estimate(case, FULL) for case in sizes.cases(FULL)]
    assert estimates and all(e.activations > 0 for e in estimates), f"{item.topic}: a case saved no activations"
    assert item.full_memory_gib == need_gib(estimates), (
        f"{item.topic}/lesson.toml says full_memory_gib = {item.full_memory_gib}, the estimate is "
        f"{need_gib(estimates)} (largest step {max(e.total for e in estimates) / GIB:.2f} GiB x headroom): "
        "update the manifest from `python -m coursekit.memory`"
    )


def test_a_lesson_says_whether_it_fits() -> None:
    assert "needs a GPU with about 35.8 GiB" in fits(35.8, get_profile("smoke", device="cpu"))


def test_a_row_too_big_for_the_gpu_is_skipped_with_a_reason(monkeypatch) -> None:
    from dataclasses import replace

    import torch

    from coursekit.memory import lesson_shortfall

    cuda = replace(get_profile("smoke", device="cpu"), device="cuda")
    assert lesson_shortfall(3, get_profile("smoke", device="cpu")) is None  # no GPU: nothing to skip
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(20 * GIB), int(24 * GIB)))
    assert lesson_shortfall(3, cuda) == "needs about 35.8 GiB of GPU memory, 20.0 GiB free here"
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(70 * GIB), int(80 * GIB)))
    assert lesson_shortfall(3, cuda) is None and lesson_shortfall(0, cuda) is None


def test_memory_this_process_caches_but_does_not_use_counts_as_free(monkeypatch) -> None:
    """``mem_get_info`` is device-wide: the caching allocator's unused blocks count as used there, and a lesson
    whose earlier cells left some would be told it does not fit."""
    from dataclasses import replace

    import torch

    from coursekit.memory import lesson_shortfall

    cuda = replace(get_profile("smoke", device="cpu"), device="cuda")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(20 * GIB), int(80 * GIB)))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: int(1 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: int(21 * GIB))
    assert lesson_shortfall(3, cuda) is None  # 20 GiB free on the device + 20 GiB cached and unused
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: int(1 * GIB))
    assert lesson_shortfall(3, cuda) == "needs about 35.8 GiB of GPU memory, 20.0 GiB free here"
