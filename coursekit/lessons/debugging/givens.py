"""Exercise 5's given code: a small gated MLP, and the compiler bugs planted while it compiles.

``exercise_bugs()`` plants three bugs in this process's torch for the length of a ``with`` block (see
``coursekit.lessons.debugging.material``): one makes the compiled model give wrong results, one makes a compile
crash, and one shows only when the model trains. Find them with your ladder and the compiler bisector rather
than by reading this file: the grader plants other bugs, in operators this notebook never shows, to check your
tools.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.lessons.debugging.material import LADDER, Bug, planted, restore_dispatch_state

DIM = 16  # features per token
HIDDEN = 32  # width of the gated layer
CLASSES = 5
# the bugs the exercise plants: what the learner must find with the ladder and the bisector, not read here
EXERCISE_BUGS = (
    Bug("wrong_decomposition", "hardswish"),
    Bug("crashing_lowering", "sigmoid"),
    Bug("wrong_decomposition", "native_layer_norm_backward"),  # wrong gradients, right outputs
)

__all__ = [
    "CLASSES",
    "DIM",
    "HIDDEN",
    "LADDER",
    "GatedMLP",
    "exercise_bugs",
    "make_input",
    "make_model",
    "restore_dispatch_state",
]


class GatedMLP(nn.Module):
    """LayerNorm, a gated MLP (an activation times a gate) with a residual, a mean over tokens and a
    classifier: ``[B, T, DIM] -> [B, CLASSES]``. ``normalise``, ``activation`` and ``gate`` are methods, so a
    subclass can replace each."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, 2 * HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)
        self.head = nn.Linear(DIM, CLASSES)
        nn.init.normal_(self.up.weight, std=0.75)  # pre-activations of a few units: every regime of the activation

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)

    def activation(self, a: torch.Tensor) -> torch.Tensor:
        return F.hardswish(a)

    def gate(self, g: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, g = self.up(self.normalise(x)).chunk(2, dim=-1)
        h = self.down(self.activation(a) * self.gate(g))
        return self.head((x + h).mean(1))


def make_model(seed: int = 0, device: str = "cpu") -> GatedMLP:
    """A ``GatedMLP`` with seeded weights, on ``device``."""
    torch.manual_seed(seed)
    return GatedMLP().to(device)


def make_input(
    seed: int = 0,
    device: str = "cpu",
    batch: int = 4,
    tokens: int = 8,
    scale: float = 3.0,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Random ``[batch, tokens, DIM]`` activations (standard deviation ``scale``), made on the CPU from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, tokens, DIM, generator=gen, dtype=torch.float64) * scale).to(device, dtype)


@contextlib.contextmanager
def exercise_bugs() -> Iterator[None]:
    """Plant the exercise's three compiler bugs inside the block; torch is as it was afterwards."""
    with planted(*EXERCISE_BUGS):
        yield
