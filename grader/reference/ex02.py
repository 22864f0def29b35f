"""Reference values for exercise 2: the given BrokenScorer, run eagerly with the learner's weights."""

from __future__ import annotations

import torch
from torch import nn

from coursekit.ex02 import BrokenScorer


def twin(fixed: nn.Module) -> BrokenScorer:
    """A BrokenScorer with the same sizes and weights as the learner's ``fixed`` model."""
    enc0, head = fixed.encoder[0], fixed.head
    broken = BrokenScorer(enc0.in_features, enc0.out_features, head.out_features)
    missing, _ = broken.load_state_dict(fixed.state_dict(), strict=False)
    if missing:
        raise AssertionError(f"FixedScorer lacks BrokenScorer's parameters {missing}: subclass BrokenScorer "
                             "and call super().__init__(*args, **kwargs)")
    return broken.to(next(fixed.parameters()).device)


def outputs_and_grads(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Output, gradient w.r.t. the input, and parameter gradients of ``model(x).square().sum()``."""
    x = x.detach().clone().requires_grad_()
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.square().sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), x.grad.detach(), grads
