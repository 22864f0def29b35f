"""Lesson 1's optimisation ladder: one weighted cross-entropy, rung by rung.

Rung 0 is the source article's hand-written loss with three hidden costs; each
later rung removes one cost or swaps in a higher-level op.  All rungs compute
the same value (the tests check it), so any change in time is the cost that
rung removed.  The lesson notebook shows each class's source before timing it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.profiler import record_function

NUM_CLASSES = 10
CLASS_WEIGHT = 0.1  # the article's uniform weights


def naive_log_softmax(x: torch.Tensor) -> torch.Tensor:
    """The article's log-softmax: fine for small logits, overflows for large ones."""
    return x - x.exp().sum(-1).log().unsqueeze(-1)


class Rung0Naive(nn.Module):
    """The starting point: H2D copy of the weights, a host-side assert, a Python range index."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with record_function("define_weights"):
            weight = torch.Tensor([CLASS_WEIGHT] * NUM_CLASSES).to(input.device)  # copy every call
        with record_function("log_softmax"):
            pred = naive_log_softmax(input)
        with record_function("assert"):
            assert target.max() < NUM_CLASSES  # reads a device tensor on the host: a sync
        with record_function("range"):
            rows = range(target.shape[0])  # a Python object: indexing copies it to the device
        with record_function("index"):
            nll = -pred[rows, target]
        with record_function("nll_calc"):
            nll = nll * weight[target]
            nll = nll / weight[target].sum()
            return nll.sum()


class Rung1WeightsOnce(nn.Module):
    """Rung 1: build the weight vector once, as a buffer that moves with ``.to(device)``."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", torch.full((NUM_CLASSES,), CLASS_WEIGHT))

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        pred = naive_log_softmax(input)
        assert target.max() < NUM_CLASSES
        nll = -pred[range(target.shape[0]), target]
        nll = nll * self.weight[target]
        return (nll / self.weight[target].sum()).sum()


class Rung2NoAssert(Rung1WeightsOnce):
    """Rung 2: validate labels in the data pipeline (``coursekit.data.check_labels``), not in the loss."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        pred = naive_log_softmax(input)
        nll = -pred[range(target.shape[0]), target]
        nll = nll * self.weight[target]
        return (nll / self.weight[target].sum()).sum()


class Rung3Arange(Rung1WeightsOnce):
    """Rung 3: index rows with ``torch.arange`` made on the device, not a Python ``range``."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        pred = naive_log_softmax(input)
        rows = torch.arange(target.shape[0], device=target.device)
        nll = -pred[rows, target]
        nll = nll * self.weight[target]
        return (nll / self.weight[target].sum()).sum()


class Rung4NLLPerCall(Rung1WeightsOnce):
    """Rung 4: one higher-level op (``nn.NLLLoss``) instead of several small ones, built per call."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.NLLLoss(self.weight)(naive_log_softmax(input), target)


class Rung5NLLOnce(Rung1WeightsOnce):
    """Rung 5: create the ``NLLLoss`` module once, in ``__init__``."""

    def __init__(self) -> None:
        super().__init__()
        self.nll = nn.NLLLoss(self.weight)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.nll(naive_log_softmax(input), target)


def rung6_builtin() -> nn.Module:
    """Rung 6: PyTorch's own ``nn.CrossEntropyLoss`` (one call: a numerically stable log-softmax, then NLL)."""
    return nn.CrossEntropyLoss(weight=torch.full((NUM_CLASSES,), CLASS_WEIGHT))


def rung7_compiled_builtin() -> nn.Module:
    """Rung 7: ``torch.compile`` of the built-in loss (the article found it did not pay)."""
    return torch.compile(rung6_builtin(), fullgraph=True)


def rung8_compiled_handwritten() -> nn.Module:
    """Rung 8: ``torch.compile`` of the hand-written rung 3, which the compiler can fuse."""
    return torch.compile(Rung3Arange(), fullgraph=True)


LADDER: dict[str, type[nn.Module] | object] = {
    "0 naive": Rung0Naive,
    "1 weights once": Rung1WeightsOnce,
    "2 no assert": Rung2NoAssert,
    "3 arange": Rung3Arange,
    "4 NLLLoss per call": Rung4NLLPerCall,
    "5 NLLLoss once": Rung5NLLOnce,
    "6 built-in CE": rung6_builtin,
    "7 compiled built-in": rung7_compiled_builtin,
    "8 compiled rung 3": rung8_compiled_handwritten,
}


def build(rung: str, device: str) -> nn.Module:
    """Instantiate ``rung`` (a key of ``LADDER``) on ``device``."""
    return LADDER[rung]().to(device)
