"""The narrow interface between the grader and a learner's notebook.

Like CS336's adapters, this is the only place that says which names the
grader reads from a submission and what each must be.  Notebooks can change
freely around these names without breaking the grader.

How a notebook is read: ``grader.loader`` runs only the *definitions* in its
code cells (imports, ``def``, ``class`` and UPPER_CASE constants), never demo
cells, in a fresh module inside a separate process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Name:
    """One name a submission must define."""

    name: str
    contract: str


INTERFACE: dict[str, dict[str, Name]] = {
    "ex01": {
        n.name: n
        for n in (
            Name("SmoothedCE", "class SmoothedCE(nn.Module): __init__(class_weights: Sequence[float], "
                 "smoothing: float = 0.1, ignore_index: int = -100); forward(logits [N, C], target [N] int64) "
                 "-> scalar tensor. Hand-written; the grader calls .to(device) on it."),
            Name("builtin_smoothed_ce", "def builtin_smoothed_ce(class_weights, smoothing=0.1, "
                 "ignore_index=-100) -> nn.Module: the same loss from PyTorch's built-in module."),
            Name("compile_loss", "def compile_loss(loss: nn.Module, backend='inductor') -> Callable: "
                 "the loss compiled as one graph with torch.compile(..., backend=backend)."),
            Name("train_step", "def train_step(model, loss_fn, optimizer, images, labels) -> Tensor: one "
                 "optimisation step returning the loss as a detached tensor, without reading it on the host."),
        )
    },
    "ex02": {
        n.name: n
        for n in (
            Name("calibrate", "@torch.library.custom_op('ex02::calibrate', mutates_args=()) def calibrate(top: "
                 "Tensor [N]) -> Tensor [N]: np.interp(top, CALIBRATION_X, CALIBRATION_Y) on top's device and "
                 "dtype, with a register_fake implementation."),
            Name("FixedScorer", "class FixedScorer(BrokenScorer): same constructor and parameters; forward(x) "
                 "-> same result as BrokenScorer without graph breaks; keeps a `mean_activation` buffer."),
        )
    },
}

INTERFACE["ex04"] = {
    n.name: n
    for n in (
        Name("bucket_length", "def bucket_length(n: int) -> int: the padded length (>= n, non-decreasing, at most "
             "MAX_BUCKETS distinct values over 1..MAX_LEN) for a batch whose longest sequence has n tokens."),
        Name("collate", "def collate(seqs: list[Tensor]) -> (tokens [B, bucket_length(longest)] int64 padded with "
             "PAD, mask [B, same] bool, True on real tokens)."),
        Name("MaskedTagger", "class MaskedTagger(NaiveTagger): forward(tokens, mask) -> logits [B, classes], equal "
             "to NaiveTagger on each unpadded sequence, with no Python-scalar guard."),
        Name("compile_tagger", "def compile_tagger(model, backend='inductor') -> Callable: the model compiled with "
             "torch.compile(..., backend=backend) for a stream of bucketed batches."),
    )
}

NOTEBOOKS: dict[str, str] = {"ex01": "01_cross_entropy_ladder.ipynb", "ex02": "02_graph_breaks.ipynb",
                             "ex04": "04_dynamic_shapes.ipynb"}


def exercise_for(path: Path) -> str | None:
    """The exercise a notebook belongs to, from its ``NN_`` file-name prefix."""
    prefix = path.name.split("_", 1)[0]
    candidate = f"ex{prefix}"
    return candidate if prefix.isdigit() and candidate in INTERFACE else None


@dataclass
class Submission:
    """A learner's definitions for one exercise, as the checks see them."""

    exercise: str
    namespace: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # load-time problems, e.g. a syntax error in cell 7

    def get(self, name: str) -> Any:
        """The learner's ``name``, or an ``AssertionError`` that says what is missing and why."""
        spec = INTERFACE[self.exercise].get(name)
        if spec is None:
            raise KeyError(f"{name!r} is not part of {self.exercise}'s interface (grader/interface.py)")
        if name not in self.namespace:
            why = "".join(f"\n  - {p}" for p in self.problems)
            raise AssertionError(
                f"`{name}` is not defined in your notebook. Expected: {spec.contract}"
                + (f"\nWhile loading your notebook:{why}" if why else "")
            )
        return self.namespace[name]
