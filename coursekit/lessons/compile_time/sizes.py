"""Lesson 6's training step at a profile's sizes, for ``coursekit.memory``: its ViT (at least 8 blocks), AdamW."""

from __future__ import annotations

import torch.nn.functional as F

from coursekit.lessons.compile_time.material import lesson_shape
from coursekit.memory import Case
from coursekit.models import image_batch, make_vit
from coursekit.profile import Profile


def _step(profile: Profile):
    images, labels = image_batch(profile, seed=0)
    model = make_vit(profile, lesson_shape(profile)).train()
    return model, (images,), lambda logits: F.cross_entropy(logits, labels)


def cases(profile: Profile) -> list[Case]:
    return [Case("training step (ViT, image_batch images)", _step)]
