"""Lesson 3's and exercise 3's training steps at a profile's sizes, for ``coursekit.memory``.

The largest is the lesson's "neither safeguard" row: the teacher neither frozen nor under ``no_grad``, so the
backward runs through all of it and its parameters get gradients (the optimiser still updates only the student).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.lessons.distillation.givens import make_student, make_teacher, shapes
from coursekit.lessons.distillation.material import SuperModel, freeze, plain_student
from coursekit.memory import Case
from coursekit.models import image_batch, make_vit
from coursekit.profile import Profile


def _classifier(profile: Profile):
    images, labels = image_batch(profile, seed=0)
    model = make_vit(profile, shapes(profile).student).train()
    return model, (images,), lambda logits: F.cross_entropy(logits, labels)


class NoSafeguards(nn.Module):
    """Student and teacher with neither safeguard: the teacher trainable and run with autograd on."""

    def __init__(self, student: nn.Module, teacher: nn.Module) -> None:
        super().__init__()
        self.student, self.teacher = student, teacher

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.student(images), self.teacher(images))


def _distill(safeguards: bool):
    def build(profile: Profile):
        images, _ = image_batch(profile, seed=0)
        vits = shapes(profile)
        student, teacher = make_vit(profile, vits.student), make_vit(profile, vits.teacher, seed=1)
        model = SuperModel(student, teacher) if safeguards else NoSafeguards(student, teacher)
        return model.train(), (images,), lambda loss: loss

    return build


def _exercise(profile: Profile):
    images, labels = image_batch(profile, seed=0)
    student, teacher = make_student(profile), freeze(make_teacher(profile))
    model = SuperModel(student, teacher).train()
    return model, (images,), lambda loss: loss


def student_parameters(model: nn.Module) -> list[nn.Parameter]:
    """What the optimiser updates: the student's parameters only."""
    return list((plain_student(model) if isinstance(model, SuperModel) else model.student).parameters())


def cases(profile: Profile) -> list[Case]:
    student = student_parameters
    return [
        Case("classifier step (student ViT, Adam)", _classifier),
        Case("distillation step (frozen teacher under no_grad, AdamW)", _distill(True), optimized=student),
        Case("distillation step, neither safeguard (backward through the teacher)", _distill(False), optimized=student),
        Case("exercise 3: distillation step (kd_student from kd_teacher, AdamW)", _exercise, optimized=student),
    ]
