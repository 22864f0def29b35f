"""Exercise 1's references (instructor only): PyTorch's own loss in float64, and the plain training step."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def smoothed_ce(
    logits: torch.Tensor, target: torch.Tensor, class_weights: Sequence[float], smoothing: float, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss value and its gradient w.r.t. ``logits``, both in float64."""
    x = logits.detach().to(torch.float64).requires_grad_()
    w = torch.tensor(class_weights, dtype=torch.float64, device=x.device)
    loss = F.cross_entropy(x, target, weight=w, ignore_index=ignore_index, label_smoothing=smoothing)
    loss.backward()
    return loss.detach(), x.grad


def accumulated_step(
    model: nn.Module,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    micro_batches: int,
    max_norm: float,
) -> torch.Tensor:
    """One optimisation step over ``micro_batches`` equal parts of the batch, gradients clipped to ``max_norm``;
    the batch's mean loss, detached."""
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=images.device)
    for x, y in zip(images.chunk(micro_batches), labels.chunk(micro_batches)):
        loss = loss_fn(model(x), y) / micro_batches
        loss.backward()
        total += loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return total


def fixture_expected(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Expected loss and gradient for each public case in ``inputs`` (``grader.exercises.ex01.public``)."""
    from grader.exercises.ex01.public import PUBLIC_CASES

    out = {}
    for case in PUBLIC_CASES:
        p = f"{case.name}/"
        loss, grad = smoothed_ce(
            inputs[p + "logits"],
            inputs[p + "target"],
            inputs[p + "weights"].tolist(),
            case.smoothing,
            case.ignore_index,
        )
        out[p + "loss"], out[p + "grad"] = loss, grad
    return out


def profiled_op_counts(fn, args: tuple) -> dict[str, int]:
    """The grader's own ATen operator counts of one call of ``fn(*args)`` after a warm-up call."""
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args)
    return {event.key: event.count for event in prof.key_averages() if event.key.startswith("aten::")}
