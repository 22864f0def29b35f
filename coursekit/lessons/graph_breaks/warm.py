"""Lesson 2's graphs for a warm compile cache (``python -m tools.warm_cache``): each item compiles and runs one."""

from __future__ import annotations

import torch

from coursekit.data import fake_cifar_batch
from coursekit.lessons.graph_breaks.bench import BROKEN, FIXED, training_step
from coursekit.lessons.graph_breaks.material import build
from coursekit.profile import Profile


def fixed_step(profile: Profile) -> None:
    training_step(torch.compile(build(FIXED, profile)))(*fake_cifar_batch(profile, 0))


def broken_step(profile: Profile) -> None:
    torch.compiler.reset()
    training_step(torch.compile(build(BROKEN, profile)))(*fake_cifar_batch(profile, 0))


ITEMS = {
    "lesson02-fixed-step": ("lesson 2: compiled FixedNet training step", fixed_step),
    "lesson02-broken-step": ("lesson 2: compiled BrokenNet training step", broken_step),
}
MEASURED = ("lesson02-fixed-step",)
