"""Exercise 3's references (instructor only): the distillation loss formula and an eager training step."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def kd_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, temperature: float, alpha: float
) -> torch.Tensor:
    """``alpha * T^2 * KL(softmax(t/T) || softmax(s/T)) + (1 - alpha) * CE(s, y)``, in float64.

    The KL divergence is summed over classes and averaged over the batch (``reduction="batchmean"``); the
    cross-entropy is averaged over the batch.
    """
    s, t = student_logits.double(), teacher_logits.double()
    log_ps = F.log_softmax(s / temperature, dim=-1)
    log_pt = F.log_softmax(t / temperature, dim=-1)
    kl = (log_pt.exp() * (log_pt - log_ps)).sum(-1).mean()
    return alpha * temperature**2 * kl + (1 - alpha) * F.cross_entropy(s, labels)


class ReferenceDistiller(nn.Module):
    """The grader's own distiller: frozen teacher under ``no_grad``, the loss in float32, run eagerly."""

    def __init__(self, student: nn.Module, teacher: nn.Module, temperature: float, alpha: float) -> None:
        super().__init__()
        self.student = student
        self.teacher = teacher.eval().requires_grad_(False)
        self.temperature, self.alpha = temperature, alpha

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        s = self.student(images)
        with torch.no_grad():
            t = self.teacher(images)
        temp = self.temperature
        soft = F.kl_div(
            F.log_softmax(s / temp, -1), F.log_softmax(t / temp, -1), reduction="batchmean", log_target=True
        )
        return self.alpha * temp**2 * soft + (1 - self.alpha) * F.cross_entropy(s, labels)


def eager_step(
    model: nn.Module, optimizer: torch.optim.Optimizer
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One eager optimisation step of ``model(images, labels) -> loss``; returns the detached loss."""

    def step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = model(images, labels)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def fixture_expected(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Expected losses for the public cases (``grader.exercises.ex03.public``)."""
    from grader.exercises.ex03.public import SETTINGS, TEMPERATURES

    out = {}
    for i, (temperature, alpha) in enumerate(SETTINGS):
        out[f"values.{i}.loss"] = kd_loss(
            inputs[f"values.{i}.s"], inputs[f"values.{i}.t"], inputs[f"values.{i}.y"], temperature, alpha
        )
    for i, temperature in enumerate(TEMPERATURES):
        out[f"temperature.{i}.loss"] = kd_loss(
            inputs["temperature.s"], inputs["temperature.t"], inputs["temperature.y"], temperature, 1.0
        )
    return out
