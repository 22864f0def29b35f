"""Exercise 1, public checks (ship in the learner kit): SmoothedCE and the built-in loss on four stored cases.

They compare with expected values stored in ``fixtures.safetensors`` (written by ``make fixtures`` from the
instructor's reference), so no reference implementation ships. The hidden checks live in ``hidden.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coursekit.lessons.cross_entropy.givens import IGNORE_INDEX, sample_inputs
from grader.judging import assert_close, fixture
from grader.registry import check

VALUE_HINT = (
    "Check the mean: divide by the sum of w[target] over rows that are not ignored (not by N); "
    "the smoothing term is (eps / C) * sum_c w[c] * -log_softmax[:, c]; ignored rows add nothing."
)


@dataclass(frozen=True)
class Case:
    """One set of loss inputs, generated from a seed."""

    name: str
    rows: int
    classes: int
    seed: int
    smoothing: float = 0.1
    ignore_index: int = IGNORE_INDEX
    scale: float = 1.0
    dtype: torch.dtype = torch.float32

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
        logits, target, weights = sample_inputs(
            self.rows, self.classes, self.seed, ignore_index=self.ignore_index, scale=self.scale, dtype=self.dtype
        )
        return logits.detach(), target, weights


PUBLIC_CASES = (
    Case("tiny", 7, 3, seed=0),
    Case("no smoothing", 64, 10, seed=1, smoothing=0.0),
    Case("heavy smoothing", 100, 10, seed=2, smoothing=0.3),
    Case("ignore_index is a real class", 257, 37, seed=3, smoothing=0.25, ignore_index=2),
)


def fixture_inputs() -> dict[str, torch.Tensor]:
    """The public cases' inputs, as ``make fixtures`` stores them."""
    out = {}
    for case in PUBLIC_CASES:
        logits, target, weights = case.inputs()
        out |= {
            f"{case.name}/logits": logits,
            f"{case.name}/target": target,
            f"{case.name}/weights": torch.tensor(weights, dtype=torch.float64),
        }
    return out


@dataclass(frozen=True)
class Expected:
    """A case's inputs with the loss and gradient expected for them."""

    case: Case
    logits: torch.Tensor
    target: torch.Tensor
    weights: list[float]
    loss: torch.Tensor
    grad: torch.Tensor


def stored(case: Case) -> Expected:
    """A public case as stored in the fixtures."""
    p = f"{case.name}/"
    return Expected(
        case,
        fixture("ex01", p + "logits"),
        fixture("ex01", p + "target"),
        fixture("ex01", p + "weights").tolist(),
        fixture("ex01", p + "loss"),
        fixture("ex01", p + "grad"),
    )


def loss_args(factory: str, exp: Expected, *, grads: bool, compiled: bool = False, label: str = "") -> dict:
    return {
        "factory": factory,
        "weights": exp.weights,
        "smoothing": exp.case.smoothing,
        "ignore_index": exp.case.ignore_index,
        "grads": grads,
        "compiled": compiled,
        "label": label or factory,
    }


def expect_values(
    learner, factory: str, cases: list[Expected], *, grads: bool, label: str, compiled: bool = False
) -> None:
    """The learner's loss (and gradient) on each case equals the expected one."""
    for exp in cases:
        hint = VALUE_HINT
        if exp.case.scale > 1:
            hint = "Large logits overflow exp(): use torch.log_softmax (or subtract each row's max). " + hint
        got = learner.ask(
            "ex01.loss",
            loss_args(factory, exp, grads=grads, compiled=compiled, label=label),
            {"logits": exp.logits, "target": exp.target},
        )
        assert_close(got.tensor("loss"), exp.loss, exp.case.dtype, f"{label} on case '{exp.case.name}'", hint)
        if grads:
            assert_close(
                got.tensor("grad"), exp.grad, exp.case.dtype, f"gradient of {label} on case '{exp.case.name}'", hint
            )


PROFILE_HINT = (
    "Profile exactly one call of fn(*args) (the warm-up call runs before the profiler starts), read each event's "
    "name (key) and count from prof.key_averages(), and keep the names that start with 'aten::'."
)


def expect_op_counts(learner, reads: int, columns: int, seed: int) -> dict[str, int]:
    """``op_counts`` on the grader's function with ``reads`` host reads and a loop over ``columns`` columns counts
    the operators those lines run: ``.item()`` (``aten::item``, ``aten::_local_scalar_dense``) ``reads`` times,
    ``aten::exp`` ``columns`` times, ``aten::select`` twice per read and once per column."""
    got = learner.ask("ex01.op_counts", {"reads": reads, "columns": columns, "seed": seed})
    counts = got.value("counts", dict)
    what = f"op_counts on a function with {reads} .item() reads and a loop over {columns} columns"
    bad = next((k for k, v in counts.items() if not isinstance(v, int)), None)
    if bad is not None:
        raise AssertionError(f"{what}: the count of {bad!r} is {counts[bad]}, not an int. " + PROFILE_HINT)
    other = next((k for k in counts if not k.startswith("aten::")), None)
    if other is not None:
        raise AssertionError(f"{what}: {other!r} is not an ATen operator; keep only 'aten::' events. " + PROFILE_HINT)
    expected = {
        "aten::_local_scalar_dense": reads,
        "aten::item": reads,
        "aten::exp": columns,
        "aten::select": 2 * reads + columns,
    }
    for op, want in expected.items():
        seen = counts.get(op, 0)
        if seen == want:
            continue
        if seen == 2 * want:
            why = " That is twice the calls of one run: is the warm-up call inside the profiler?"
        elif seen == want + 1 and op in ("aten::exp", "aten::select"):
            why = " One more than a steady call runs: the function has a one-off cost on its first call. Warm up first."
        else:
            why = " Count every call, nested ones included: key_averages() gives each operator's total."
        raise AssertionError(
            f"{what}: {op} counted {seen} times, the function runs it {want} times.{why} " + PROFILE_HINT
        )
    return counts


@check("ex01.profile.op_counts", kind="correctness", points=1, needs=("op_counts",), public=True)
def profile_op_counts(learner, ctx) -> None:
    """op_counts counts the ATen operators of one call: host reads, a Python loop's operators, nested calls."""
    expect_op_counts(learner, reads=3, columns=5, seed=0)


@check("ex01.smoothed_ce.values", kind="correctness", points=2, needs=("SmoothedCE",), public=True)
def smoothed_ce_values(learner, ctx) -> None:
    """SmoothedCE matches F.cross_entropy(weight, ignore_index, label_smoothing) on four stored inputs of float32
    logits of ordinary size; the hidden checks add logits large enough to overflow a naive exp, and float64."""
    expect_values(learner, "SmoothedCE", [stored(c) for c in PUBLIC_CASES], grads=False, label="SmoothedCE")


@check("ex01.builtin.values", kind="correctness", points=1, needs=("builtin_smoothed_ce",), public=True)
def builtin_values(learner, ctx) -> None:
    """builtin_smoothed_ce returns PyTorch's own loss module configured to compute the same loss."""
    got = learner.ask("ex01.loss_module", loss_args("builtin_smoothed_ce", stored(PUBLIC_CASES[0]), grads=False))
    if not got.value("builtin", bool):
        raise AssertionError(
            f"builtin_smoothed_ce built a {got.text('class')}, not torch.nn.CrossEntropyLoss itself: this task is "
            "PyTorch's own module, configured with weight=, ignore_index= and label_smoothing= (no subclass, no "
            "loss of your own)."
        )
    expect_values(
        learner, "builtin_smoothed_ce", [stored(c) for c in PUBLIC_CASES], grads=True, label="builtin_smoothed_ce"
    )
