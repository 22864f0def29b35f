"""The training step the lessons measure, and helpers to time it."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coursekit.data import fake_cifar_batch
from coursekit.models import ToyConvNet
from coursekit.profile import Profile
from coursekit.timing import Timing, time_per_call

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_model(profile: Profile, seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The toy conv net and the article's SGD optimiser, on the profile's device."""
    torch.manual_seed(seed)
    model = ToyConvNet(profile.image_size, profile.num_classes).to(profile.device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)


def train_step(
    model: nn.Module, loss_fn: LossFn, optimizer: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """One optimisation step; returns the loss as a device tensor (reading it would sync)."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.detach()


def time_step(profile: Profile, loss_fn: LossFn, seed: int = 0) -> Timing:
    """Median seconds per training step with ``loss_fn``, cycling through four pre-made batches."""
    model, optimizer = make_model(profile, seed)
    batches = [fake_cifar_batch(profile, seed + i) for i in range(4)]
    return time_per_call(
        lambda x, y: train_step(model, loss_fn, optimizer, x, y),
        lambda i: batches[i % len(batches)],
        device=profile.device,
        warmup=profile.warmup,
        samples=profile.steps,
        min_sample_s=profile.min_sample_s,
    )


def loss_inputs(profile: Profile, seed: int, rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (requiring grad) and labels shaped like the model's output."""
    gen = torch.Generator().manual_seed(seed)
    rows = rows or profile.batch_size
    logits = torch.randn(rows, profile.num_classes, generator=gen).to(profile.device).requires_grad_()
    labels = torch.randint(0, profile.num_classes, (rows,), generator=gen).to(profile.device)
    return logits, labels


def time_loss(profile: Profile, loss_fn: LossFn, seed: int = 0) -> Timing:
    """Median seconds for the loss's forward and backward alone (the logits' gradient accumulates from call to
    call, one more kernel a call, as in any loop that does not clear it)."""
    inputs = [loss_inputs(profile, seed + i) for i in range(4)]
    return time_per_call(
        lambda x, y: loss_fn(x, y).backward(),
        lambda i: inputs[i % len(inputs)],
        device=profile.device,
        warmup=profile.warmup,
        samples=profile.steps,
        min_sample_s=profile.min_sample_s,
    )
