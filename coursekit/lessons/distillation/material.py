"""Lesson 3's building blocks: a timm ViT student, a frozen deeper ViT teacher inside the loss.

The source article distils a depth-24 ViT into timm's default ViT with an
``ExpensiveLoss`` (the teacher runs inside the loss) and compares three
set-ups: compiling the model only, compiling the loss on its own, and
wrapping model, teacher and loss in one module compiled as one graph (with a
pass-through loss).  :func:`build` makes each of those, :func:`measure`
times one, and ``coursekit.lessons.distillation.bench`` records them all.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.lessons.distillation.givens import Shapes, shapes
from coursekit.models import Batch, image_batch, make_vit  # noqa: F401 - the lesson's names for them
from coursekit.profile import Profile
from coursekit.timing import Timing, synchronize, time_per_call

VARIANTS: dict[str, str] = {
    "eager": "student and loss run eagerly",
    "student compiled": "torch.compile(student); the loss (with its teacher) stays eager",
    "loss compiled": "torch.compile(ExpensiveLoss); the student stays eager",
    "one graph": "student + teacher + loss wrapped in one module, compiled together; a pass-through loss",
}
TEACHER_MODES = ("no_grad", "inference_mode")


def freeze(teacher: nn.Module) -> nn.Module:
    """Put ``teacher`` in eval mode with no parameter requiring a gradient; returns it."""
    return teacher.eval().requires_grad_(False)


def teacher_context(mode: str) -> contextlib.AbstractContextManager:
    """``torch.no_grad()`` or ``torch.inference_mode()``: how the teacher's forward is run."""
    if mode not in TEACHER_MODES:
        raise ValueError(f"teacher mode {mode!r}: choose one of {TEACHER_MODES}")
    return torch.no_grad() if mode == "no_grad" else torch.inference_mode()


class ExpensiveLoss(nn.Module):
    """The article's loss: mean squared error between the student's logits and a frozen teacher's."""

    def __init__(self, teacher: nn.Module, teacher_mode: str = "no_grad") -> None:
        super().__init__()
        self.teacher = freeze(teacher)
        self.teacher_mode = teacher_mode

    def forward(self, images: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
        with teacher_context(self.teacher_mode):
            target = self.teacher(images)
        return F.mse_loss(student_logits, target)


class SuperModel(nn.Module):
    """The article's wrapper: student, teacher and loss in one module whose output is the loss."""

    def __init__(self, student: nn.Module, teacher: nn.Module, teacher_mode: str = "no_grad") -> None:
        super().__init__()
        self.student = student
        self.loss = ExpensiveLoss(teacher, teacher_mode)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.loss(images, self.student(images))

    def train(self, mode: bool = True) -> SuperModel:
        """Train the student; the teacher stays in eval mode whatever the caller asks."""
        super().train(mode)
        self.loss.teacher.eval()
        return self


def plain_student(model: nn.Module) -> nn.Module:
    """The trainable student inside a (possibly compiled) ``SuperModel``: what you save and serve."""
    model = getattr(model, "_orig_mod", model)  # torch.compile's OptimizedModule keeps the original here
    return model.student if isinstance(model, SuperModel) else model


@dataclass
class Setup:
    """One way of running the distillation step: ``step(images, labels) -> loss`` and its parts."""

    variant: str
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    model: nn.Module  # SuperModel, compiled or not
    optimizer: torch.optim.Optimizer


def build(
    variant: str,
    profile: Profile,
    *,
    amp: bool = False,
    mode: str | None = None,
    teacher_mode: str = "no_grad",
    seed: int = 0,
    vits: Shapes | None = None,
) -> Setup:
    """The distillation training step for ``variant`` (see ``VARIANTS``).

    ``amp`` runs the forward under bf16 autocast; ``mode`` is passed to
    ``torch.compile`` (``None`` = default).  Every variant starts from the same
    weights (``seed``) and the optimiser sees only the student's parameters.
    ``vits`` overrides the profile's model sizes (the lesson's tests use tiny ones).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: choose one of {list(VARIANTS)}")
    vits = vits or shapes(profile)
    student = make_vit(profile, vits.student, seed)
    teacher = make_vit(profile, vits.teacher, seed + 1)
    model = SuperModel(student, teacher, teacher_mode).train()
    optimizer = torch.optim.AdamW(plain_student(model).parameters(), lr=1e-4)

    def compiled(fn: nn.Module) -> Callable:
        return torch.compile(fn, mode=mode)

    if variant == "one graph":
        model = compiled(model)
        forward = model
    elif variant == "student compiled":
        run_student, loss = compiled(student), model.loss
        forward = lambda images: loss(images, run_student(images))  # noqa: E731
    elif variant == "loss compiled":
        run_loss = compiled(model.loss)
        forward = lambda images: run_loss(images, student(images))  # noqa: E731
    else:
        forward = model

    def step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(profile.device).type, torch.bfloat16, enabled=amp):
            loss = forward(images)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return Setup(variant, step, model, optimizer)


def classifier_step(
    profile: Profile, *, compiled: bool, amp: bool, mode: str | None = None, seed: int = 0
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The article's first experiment: a plain ViT classifier trained with cross-entropy and Adam."""
    model = make_vit(profile, shapes(profile).student, seed).train()
    optimizer = torch.optim.Adam(model.parameters())
    forward = torch.compile(model, mode=mode) if compiled else model

    def step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(profile.device).type, torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(forward(images), labels)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


@dataclass(frozen=True)
class StepTimes:
    """First call (compiles, for a compiled step) and the steady-state step time."""

    first_s: float
    step: Timing

    @property
    def step_ms(self) -> float:
        return self.step.median_s * 1e3

    def breakeven_steps(self, eager: StepTimes) -> float:
        """Steps after which compiling has paid for itself against ``eager`` (inf if it never does)."""
        saved = eager.step.median_s - self.step.median_s
        extra = self.first_s - eager.first_s
        return max(extra, 0.0) / saved if saved > 0 else float("inf")


def measure(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], profile: Profile, samples: int = 7, seed: int = 1000
) -> StepTimes:
    """Time the first call of ``step`` (compilation), then its median over fresh batches."""
    batches = [image_batch(profile, seed + i) for i in range(4)]
    synchronize(profile.device)
    start = time.perf_counter()
    step(*batches[0])
    synchronize(profile.device)
    first = time.perf_counter() - start
    timing = time_per_call(
        step,
        lambda i: batches[i % len(batches)],
        device=profile.device,
        warmup=profile.warmup,
        samples=samples,
        min_sample_s=profile.min_sample_s,
    )
    return StepTimes(first, timing)


def loss_curve(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], profile: Profile, steps: int, seed: int = 5000
) -> Iterator[float]:
    """Run ``steps`` training steps on a small repeating set of batches; yield each loss (read on the host)."""
    batches = [image_batch(profile, seed + i) for i in range(4)]
    for i in range(steps):
        yield float(step(*batches[i % len(batches)]))
