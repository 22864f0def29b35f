"""Lesson 3's graphs for a warm compile cache (``python -m tools.warm_cache``): each item compiles and runs one."""

from __future__ import annotations

import torch

from coursekit.lessons.distillation.bench import compiled_steps, true_fp32
from coursekit.models import image_batch
from coursekit.profile import Profile


def every_compiled_step(profile: Profile) -> None:
    """Compile and run once each step the lesson's notebook times, in the notebook's state: true fp32 matmuls
    (``true_fp32``), since the float32 matmul precision is part of Inductor's cache key (compiled without it, the
    notebook's steps missed the cache)."""
    true_fp32()
    batch = image_batch(profile, 0)
    for make in compiled_steps(profile).values():
        torch.compiler.reset()
        make()(*batch)
    torch.compiler.reset()


ITEMS = {
    "lesson03-compiled-steps": (
        "lesson 3: every compiled step its notebook times (classifier, distillation variants, compile modes)",
        every_compiled_step,
    )
}
MEASURED = ()
