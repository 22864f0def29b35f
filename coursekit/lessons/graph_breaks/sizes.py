"""Lesson 2's training step at a profile's sizes, for ``coursekit.memory``: its net, SGD with momentum."""

from __future__ import annotations

import torch.nn.functional as F

from coursekit.data import fake_cifar_batch
from coursekit.lessons.graph_breaks.material import build
from coursekit.memory import Case
from coursekit.profile import Profile


def _step(profile: Profile):
    images, labels = fake_cifar_batch(profile, seed=0)
    return build("4 fixed", profile), (images,), lambda logits: F.cross_entropy(logits, labels)


def cases(profile: Profile) -> list[Case]:
    return [Case("training step (the fixed net, batch_size images)", _step, optimizer_slots=1)]
