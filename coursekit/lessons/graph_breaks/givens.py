"""Exercise 2's given code: a calibrated scorer that is correct in eager mode and full of graph breaks.

The exercise notebook shows this source; the grader compiles this same class
as the baseline, so edits in a learner's notebook cannot change it.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)

MAX_ACTIVATION = 6.0
# Knots of a piecewise-linear calibration curve: a row's top score -> a confidence in [0.05, 1].
CALIBRATION_X = (-3.0, -1.0, 0.0, 0.5, 1.0, 3.0)
CALIBRATION_Y = (0.05, 0.2, 0.5, 0.7, 0.85, 1.0)


class BrokenScorer(nn.Module):
    """Scores rows of features; all-zero rows are padding and score zero.

    forward(x [N, in_features]) -> [N, num_outputs]: encode, rescale if the
    activations are too large, centre them on the mean of the real rows,
    score, and scale each row by a calibrated confidence of its top score.
    """

    def __init__(self, in_features: int = 32, hidden: int = 64, num_outputs: int = 8) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU())
        self.head = nn.Linear(hidden, num_outputs)
        self.stats: dict[str, float] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        peak = h.abs().amax()
        if peak > MAX_ACTIVATION:
            h = h * (MAX_ACTIVATION / peak)
        self.stats["mean_activation"] = h.mean().item()
        log.debug("scoring %d rows", x.shape[0])
        real = x.abs().sum(-1) > 0
        h = h - h[real].mean(0)
        scores = self.head(h)
        top = scores.detach().amax(-1).cpu().numpy()
        confidence = torch.from_numpy(np.interp(top, CALIBRATION_X, CALIBRATION_Y)).to(scores)
        return scores * confidence.unsqueeze(-1) * real.unsqueeze(-1)


def sample_rows(
    rows: int,
    in_features: int,
    seed: int,
    *,
    device: str = "cpu",
    padding: float = 0.2,
    scale: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Random feature rows, about ``padding`` of them all-zero (row 0 is always real)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, in_features, generator=gen, dtype=torch.float64) * scale
    pad = torch.rand(rows, generator=gen) < padding
    pad[0] = False
    x[pad] = 0.0
    return x.to(dtype).to(device)
