"""Lesson 1's training step at a profile's sizes, for ``coursekit.memory``: the toy conv net, SGD with momentum."""

from __future__ import annotations

import torch.nn.functional as F

from coursekit.data import fake_cifar_batch
from coursekit.memory import Case
from coursekit.models import ToyConvNet
from coursekit.profile import Profile


def _step(profile: Profile):
    model = ToyConvNet(profile.image_size, profile.num_classes).to(profile.device)
    images, labels = fake_cifar_batch(profile, seed=0)
    return model, (images,), lambda logits: F.cross_entropy(logits, labels)


def cases(profile: Profile) -> list[Case]:
    return [Case("training step (toy conv net, batch_size images)", _step, optimizer_slots=1)]
