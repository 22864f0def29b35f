"""Lesson 6's steps at a profile's sizes, for ``coursekit.memory``: its ViT's training step (AdamW), and the forward
and backward that section 2's capture runs on the deepest ViT it measures (no optimizer)."""

from __future__ import annotations

from dataclasses import replace

import torch.nn.functional as F

from coursekit.lessons.compile_time.material import capture_depths, lesson_shape
from coursekit.memory import Case
from coursekit.models import image_batch, make_vit
from coursekit.profile import Profile


def _step(profile: Profile, depth: int | None = None):
    images, labels = image_batch(profile, seed=0)
    shape = lesson_shape(profile)
    model = make_vit(profile, replace(shape, depth=depth or shape.depth)).train()
    return model, (images,), lambda logits: F.cross_entropy(logits, labels)


def capture_case(depth: int) -> Case:
    """The forward and backward section 2's capture runs on the lesson's ViT at ``depth`` blocks."""
    return Case(f"capture's forward and backward ({depth} blocks)", lambda p: _step(p, depth), optimizer_slots=0)


def cases(profile: Profile) -> list[Case]:
    return [Case("training step (ViT, image_batch images)", _step), capture_case(max(capture_depths(profile)))]
