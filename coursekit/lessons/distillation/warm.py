"""Lesson 3's graphs for a warm compile cache (``python -m tools.warm_cache``): each item compiles and runs one."""

from __future__ import annotations

import torch

from coursekit.lessons.distillation.bench import DTYPES, bf16_native
from coursekit.lessons.distillation.material import build
from coursekit.models import image_batch
from coursekit.profile import Profile


def one_graph(profile: Profile) -> None:
    for dtype, amp in DTYPES.items():  # the dtypes the lesson's distillation runs: bf16 where it is in hardware
        if dtype == "bf16" and not bf16_native(profile):
            continue
        torch.compiler.reset()
        build("one graph", profile, amp=amp).step(*image_batch(profile, 0))


ITEMS = {"lesson03-one-graph": ("lesson 3: one-graph distillation step, fp32 (and bf16)", one_graph)}
MEASURED = ()
