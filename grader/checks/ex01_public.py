"""Exercise 1, public checks: the ones a learner runs inside the exercise notebook.

This module ships in the learner kit (``make release``), so it holds only the
public checks and what they need: the seeded public cases, the value
comparison and the hints.  The hidden checks live in ``grader.checks.ex01``,
which imports from here and never ships.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from coursekit.ex01 import IGNORE_INDEX, sample_inputs
from grader.checks.common import assert_close, require_tensor
from grader.reference.ex01 import smoothed_ce
from grader.registry import check

VALUE_HINT = ("Check the mean: divide by the sum of w[target] over rows that are not ignored (not by N); "
              "the smoothing term is (eps / C) * sum_c w[c] * -log_softmax[:, c]; ignored rows add nothing.")


@dataclass(frozen=True)
class Case:
    """One set of loss inputs."""

    name: str
    rows: int
    classes: int
    seed: int
    smoothing: float = 0.1
    ignore_index: int = IGNORE_INDEX
    scale: float = 1.0
    dtype: torch.dtype = torch.float32

    def inputs(self, device: str) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
        return sample_inputs(self.rows, self.classes, self.seed, device=device, ignore_index=self.ignore_index,
                             scale=self.scale, dtype=self.dtype)


def public_cases(ctx) -> list[Case]:
    """Five seeded cases a learner can reproduce."""
    p = ctx.profile
    return [
        Case("tiny", 7, 3, seed=0),
        Case("no smoothing", 64, 10, seed=1, smoothing=0.0),
        Case("heavy smoothing", 100, 10, seed=2, smoothing=0.3),
        Case("ignore_index is a real class", 257, 37, seed=3, smoothing=0.25, ignore_index=2),
        Case("profile size", p.loss_batch, p.loss_classes, seed=4),
    ]


def _build(factory, weights: list[float], case: Case, device: str) -> nn.Module:
    module = factory(weights, smoothing=case.smoothing, ignore_index=case.ignore_index)
    if not isinstance(module, nn.Module):
        raise AssertionError(f"expected an nn.Module, got {type(module).__name__}")
    return module.to(device)


def _check_values(factory, cases: list[Case], ctx, *, grads: bool, label: str, wrap=lambda m: m) -> None:
    for case in cases:
        logits, target, weights = case.inputs(ctx.device)
        want, want_grad = smoothed_ce(logits, target, weights, case.smoothing, case.ignore_index)
        hint = VALUE_HINT
        if case.scale > 1:
            hint = "Large logits overflow exp(): use torch.log_softmax (or subtract each row's max). " + hint
        loss = wrap(_build(factory, weights, case, ctx.device))(logits, target)
        assert_close(loss, want, case.dtype, f"{label} on case '{case.name}'", hint)
        if grads:
            require_tensor(loss, label).backward()
            if logits.grad is None:
                raise AssertionError(f"{label} on case '{case.name}': no gradient reached the logits "
                                     "(is the result detached, or built with .item()/torch.tensor?)")
            assert_close(logits.grad, want_grad, case.dtype, f"gradient of {label} on case '{case.name}'", hint)


@check("ex01.smoothed_ce.values", kind="correctness", points=2, needs=("SmoothedCE",), public=True)
def smoothed_ce_values(sub, ctx) -> None:
    """SmoothedCE matches F.cross_entropy(weight, ignore_index, label_smoothing) on five seeded inputs."""
    _check_values(sub.get("SmoothedCE"), public_cases(ctx), ctx, grads=False, label="SmoothedCE")


@check("ex01.builtin.values", kind="correctness", points=1, needs=("builtin_smoothed_ce",), public=True)
def builtin_values(sub, ctx) -> None:
    """builtin_smoothed_ce returns PyTorch's own loss module configured to compute the same loss."""
    factory = sub.get("builtin_smoothed_ce")
    _check_values(factory, public_cases(ctx), ctx, grads=True, label="builtin_smoothed_ce")
