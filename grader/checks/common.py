"""Helpers shared by check modules: comparisons with teaching messages."""

from __future__ import annotations

from typing import Any

import torch

# (rtol, atol) per dtype of the inputs
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float16: (1e-2, 1e-3),
}


def require_tensor(value: Any, what: str) -> torch.Tensor:
    """``value`` if it is a tensor, else an ``AssertionError`` naming what it was."""
    if not isinstance(value, torch.Tensor):
        raise AssertionError(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
        raise AssertionError(f"{what} is a tensor subclass ({type(value).__name__}); return a plain torch.Tensor "
                             "(a subclass can defer or fake its values)")
    return value


def assert_close(actual: Any, expected: torch.Tensor, dtype: torch.dtype, what: str, hint: str = "") -> None:
    """Compare with the tolerance for ``dtype``; the message shows the largest difference."""
    actual = require_tensor(actual, what)
    if actual.shape != expected.shape:
        raise AssertionError(f"{what} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
                             + (" (a scalar: reduce to one number)" if expected.dim() == 0 else ""))
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not torch.isfinite(a).all():
        raise AssertionError(f"{what} contains inf or nan where the reference is finite. {hint}".strip())
    rtol, atol = TOLERANCES[dtype]
    if not torch.allclose(a, e, rtol=rtol, atol=atol):
        diff = (a - e).abs().max().item()
        shown = f"got {a.item():.7g}, expected {e.item():.7g}" if a.dim() == 0 else f"max abs difference {diff:.3g}"
        raise AssertionError(f"{what}: {shown} (tolerance for {str(dtype).removeprefix('torch.')}: "
                             f"rtol={rtol:g}, atol={atol:g}). {hint}".strip())
