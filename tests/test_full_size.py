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
