"""Exercise 3's given code: the student, the teacher, the data and the optimiser.

Hinton-style logit distillation: a small timm ViT student learns from a frozen,
wider ViT teacher (deeper too in the smoke profile).  The exercise notebook and the grader both build
the models here, so edits in a learner's notebook cannot change what is graded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from coursekit.lessons import lesson
from coursekit.models import ViTShape, image_batch, make_vit
from coursekit.profile import Profile

TEMPERATURE = 4.0  # softens both distributions; the soft term is scaled by TEMPERATURE ** 2
ALPHA = 0.5  # weight of the soft (teacher) term; 1 - ALPHA weighs the hard-label cross-entropy
LEARNING_RATE = 1e-3
STUDENT_SEED = 0
TEACHER_SEED = 1

__all__ = ["ALPHA", "TEMPERATURE", "batch", "make_optimizer", "make_student", "make_teacher", "shapes"]


@dataclass(frozen=True)
class Shapes:
    """Lesson 3's ViTs on one profile, from its manifest (``lesson.toml``, ``[sizes.<profile>]``)."""

    student: ViTShape  # the lesson's student (ViT-B/16 on full)
    teacher: ViTShape  # the lesson's frozen, deeper teacher
    kd_student: ViTShape  # exercise 3's student; its teacher is wider (and, in smoke, deeper)
    kd_teacher: ViTShape


def shapes(profile: Profile) -> Shapes:
    """The lesson's and the exercise's ViT sizes on ``profile``."""
    sizes = lesson("distillation").sizes_for(profile.name)
    return Shapes(**{name: ViTShape(**size) for name, size in sizes.items()})


def make_student(profile: Profile, seed: int = STUDENT_SEED) -> nn.Module:
    """The student: a small timm ``VisionTransformer`` (``shapes(profile).kd_student``), in train mode."""
    return make_vit(profile, shapes(profile).kd_student, seed).train()


def make_teacher(profile: Profile, seed: int = TEACHER_SEED) -> nn.Module:
    """The teacher: a wider ViT (``shapes(profile).kd_teacher``). Fresh from timm: not frozen yet."""
    return make_vit(profile, shapes(profile).kd_teacher, seed)


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """AdamW over *all* of ``model``'s parameters, as training scripts usually write it.

    Parameters that never receive a gradient are skipped by the optimiser, so a
    properly frozen teacher stays exactly as it was.
    """
    return torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)


def batch(profile: Profile, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images ``[B, 3, H, W]`` and labels ``[B]`` on the profile's device."""
    return image_batch(profile, seed)
