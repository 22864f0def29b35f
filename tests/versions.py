"""The torch release under test, for the few checks whose expected text differs between supported versions."""

from __future__ import annotations

import torch

TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
BEFORE_2_14 = TORCH < (2, 14)  # `make test-compat` runs 2.11, `make test` the pinned 2.14
