"""Exercise 1's given code: a smoothed, weighted, masked cross-entropy with hidden costs.

The exercise notebook shows this source; the grader times learners against
this same class, so a learner's edits to their notebook cannot change the
baseline.  The loss it computes is exactly
``F.cross_entropy(logits, target, weight=w, ignore_index=i, label_smoothing=eps)``:

    loss = (1 - eps) * sum_k w[t_k] * -logp[k, t_k] / W
         + (eps / C) * sum_k sum_c w[c] * -logp[k, c] / W,   W = sum_k w[t_k]

where k runs over rows whose target is not ``ignore_index``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

IGNORE_INDEX = -100


class NaiveSmoothedCE(nn.Module):
    """Correct for moderate logits, and slow in several ways that a profile shows."""

    def __init__(
        self, class_weights: Sequence[float], smoothing: float = 0.1, ignore_index: int = IGNORE_INDEX
    ) -> None:
        super().__init__()
        self.class_weights = list(class_weights)
        self.smoothing = smoothing
        self.ignore_index = ignore_index

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        num_classes = logits.shape[1]
        weight = torch.tensor(self.class_weights, device=logits.device)
        keep = torch.tensor([t != self.ignore_index for t in target.tolist()], device=logits.device)
        assert target[keep].max() < num_classes, "target out of range"
        logp = logits - logits.exp().sum(-1).log().unsqueeze(-1)
        safe_target = torch.where(keep, target, 0)
        rows = range(target.shape[0])
        target_weight = weight[safe_target] * keep
        nll = -(logp[rows, safe_target] * target_weight).sum()
        smooth = 0.0
        for c in range(num_classes):
            smooth = smooth - (logp[:, c] * weight[c] * keep).sum()
        eps = self.smoothing
        return ((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()


def naive_train_step(
    model: nn.Module,
    loss_fn: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    micro_batches: int = 2,
    max_norm: float = 1.0,
) -> float:
    """Gradient accumulation over equal micro-batches, then the gradients' total norm clipped to ``max_norm``, then
    one optimizer step; returns the batch's mean loss. Right, and it waits for the device several times a step."""
    optimizer.zero_grad()
    total = 0.0
    for x, y in zip(images.chunk(micro_batches), labels.chunk(micro_batches)):
        loss = loss_fn(model(x), y) / micro_batches
        loss.backward()
        total += loss.item()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))
    optimizer.step()
    return total


def sample_inputs(
    rows: int,
    classes: int,
    seed: int,
    *,
    device: str = "cpu",
    ignore_fraction: float = 0.1,
    ignore_index: int = IGNORE_INDEX,
    scale: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """Random logits (requiring grad), targets with some ``ignore_index`` rows, and class weights."""
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, classes, generator=gen, dtype=torch.float64) * scale).to(dtype)
    target = torch.randint(0, classes, (rows,), generator=gen)
    ignored = torch.rand(rows, generator=gen) < ignore_fraction
    ignored[0] = False  # at least one row counts, so the mean is defined
    target = torch.where(ignored, torch.full_like(target, ignore_index), target)
    weights = (0.5 + 1.5 * torch.rand(classes, generator=gen, dtype=torch.float64)).tolist()
    return logits.to(device).requires_grad_(), target.to(device), weights
