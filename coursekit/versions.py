"""The torch release in use, for the few behaviours (and expected messages) that differ between supported versions."""

from __future__ import annotations

import torch

TORCH: tuple[int, int] = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])  # (2, 14)


def torch_before(major: int, minor: int) -> bool:
    """True when the torch in use is older than ``major.minor`` (`make test-compat` runs 2.11, `make test` 2.14)."""
    return TORCH < (major, minor)
