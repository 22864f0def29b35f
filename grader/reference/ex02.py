"""Reference values for exercise 2: the given BrokenScorer, run eagerly with the learner's weights."""

from __future__ import annotations

import torch
from torch import nn

from coursekit.ex02 import BrokenScorer


def twin(fixed: nn.Module) -> BrokenScorer:
    """A BrokenScorer with the same sizes and weights as the learner's ``fixed`` model."""
    enc0, enc2, head = fixed.encoder[0], fixed.encoder[2], fixed.head
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


def torch_calibrate(device: str, dtype: torch.dtype = torch.float32):
    """A pure-torch twin of ``calibrate`` (np.interp semantics) with its constants built up front.

    The traffic check swaps it in for the learner's op, so the op's own host
    round trip (its known price) is not counted against the learner's forward.
    """
    from coursekit.ex02 import CALIBRATION_X, CALIBRATION_Y

    xp = torch.tensor(CALIBRATION_X, dtype=dtype, device=device)
    fp = torch.tensor(CALIBRATION_Y, dtype=dtype, device=device)

    def calibrate(top: torch.Tensor) -> torch.Tensor:
        i = torch.searchsorted(xp, top.detach().contiguous()).clamp(1, len(xp) - 1)
        t = ((top.detach() - xp[i - 1]) / (xp[i] - xp[i - 1])).clamp(0, 1)
        return fp[i - 1] + t * (fp[i] - fp[i - 1])

    return calibrate
