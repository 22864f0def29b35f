"""Judge-side helpers shared by every exercise's checks: comparisons with teaching messages, fixtures."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from grader.exercises import HERE

# (rtol, atol) per dtype of the inputs
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float16: (1e-2, 1e-3),
}
# On a GPU the learner's float32 kernels reduce in other orders than the references and fixtures (computed on
# the CPU or by other kernels): the first H100 run (torch 2.11) saw honest reference solutions differ by up to
# 5.0e-5 on outputs near zero (exercise 4's masked means). A wrong answer differs by far more.
CUDA_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {torch.float32: (1e-3, 2e-4)}
_device_class = "cpu"


def use_device_class(device_class: str) -> None:
    """Compare with the tolerances of ``device_class`` (``cpu`` or ``cuda``) from now on, in this judge."""
    global _device_class
    _device_class = device_class


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype`` on the device class being graded."""
    if _device_class == "cuda" and dtype in CUDA_TOLERANCES:
        return CUDA_TOLERANCES[dtype]
    return TOLERANCES[dtype]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str, hint: str = "") -> None:
    """Compare with the tolerance for ``dtype``; the message shows the largest difference."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(
            f"{what} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
            + (" (a scalar: reduce to one number)" if expected.dim() == 0 else "")
        )
    if actual.dtype == torch.bool or expected.dtype == torch.bool:
        actual, expected = actual.to(torch.float64), expected.to(torch.float64)
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not torch.isfinite(a).all() and torch.isfinite(e).all():
        raise AssertionError(f"{what} contains inf or nan where the reference is finite. {hint}".strip())
    rtol, atol = tolerance(dtype)
    if not torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
        diff = (a - e).abs().nan_to_num(float("inf")).max().item()
        shown = f"got {a.item():.7g}, expected {e.item():.7g}" if a.dim() == 0 else f"max abs difference {diff:.3g}"
        raise AssertionError(
            f"{what}: {shown} (tolerance for {str(dtype).removeprefix('torch.')}: "
            f"rtol={rtol:g}, atol={atol:g}). {hint}".strip()
        )


def assert_parameters_close(answer, prefix: str, model: torch.nn.Module, what: str, hint: str = "") -> None:
    """Each of ``model``'s parameters (the grader's, after its reference steps) against the tensor
    ``{prefix}{name}`` a probe reported from the learner's model, at float32's tolerance."""
    for name, p in model.named_parameters():
        got = answer.tensor(f"{prefix}{name}", shape=tuple(p.shape))
        assert_close(got, p, torch.float32, f"parameter {name} {what}", hint)


def fixture_path(exercise: str) -> Path:
    return HERE / exercise / "fixtures.safetensors"


@cache
def fixtures(exercise: str) -> dict[str, torch.Tensor]:
    """The stored inputs and expected values of ``exercise``'s public cases (``make fixtures`` writes them)."""
    import safetensors.torch

    path = fixture_path(exercise)
    if not path.is_file():
        raise AssertionError(
            f"{path.name} is missing for {exercise}: the public checks compare against it "
            "(an instructor runs `make fixtures`)"
        )
    return safetensors.torch.load_file(str(path))


def fixture(exercise: str, name: str) -> torch.Tensor:
    """One stored tensor."""
    return fixtures(exercise)[name]


INCONSISTENT = "inconsistent answers"  # how an InconsistentAnswer's reason starts
NOT_REPEATABLE = (
    "the grader asks your code the same thing twice and got two answers. Code that draws random numbers (dropout "
    "left in training mode, torch.rand) or keeps state that changes its output from call to call does this, and so "
    "does an answer made up without running the code"
)


def protocol_cause(why: str) -> str:
    """What may have broken the protocol, for a learner (the grader's report and a notebook's own check say it the
    same way): ``NOT_REPEATABLE`` where two answers disagreed (forged answers look like this, and so does honest code
    that is not repeatable), else tampering with the worker."""
    return NOT_REPEATABLE if why.startswith(INCONSISTENT) else "learner code tampered with the grading worker"


def inconsistent_message(why: str) -> str:
    """A check's message after an ``InconsistentAnswer``: what disagreed, why code does that, and what it costs."""
    return (
        f"{why}: {NOT_REPEATABLE}. In the grader this check scores zero and the submission is flagged for an "
        "instructor to review; the other checks still grade. Make the code repeatable: model.eval() where dropout "
        "is not wanted, no state that changes what a call returns"
    )


def assert_consistent(seen: torch.Tensor, own: torch.Tensor, what: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """A structure probe's values must be the ones the learner's code gives for the same inputs when asked
    directly: an answer made up without running the code is inconsistent (``InconsistentAnswer``: the check
    scores zero and the submission is flagged). The verdict of the structure check itself stays with the counts,
    so honest code that computes wrong values keeps the structure points it earns, as before."""
    from grader.protocol import InconsistentAnswer

    if tuple(seen.shape) != tuple(own.shape) or not torch.allclose(
        seen.double(), own.double(), rtol=rtol, atol=atol, equal_nan=True
    ):
        raise InconsistentAnswer(f"{INCONSISTENT}: {what} differs from what the same code gave for the same inputs")


def assert_answers_consistent(got, own, what: dict[str, str], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """``assert_consistent`` for each tensor two answers (``grader.protocol.Answer``) hold under the same key:
    ``what`` maps each key to the words a broken protocol names it by."""
    for key, words in what.items():
        assert_consistent(got.tensor(key), own.tensor(key), words, rtol=rtol, atol=atol)


def linear_layers(*models: torch.nn.Module) -> int:
    """How many ``nn.Linear`` layers ``models`` hold: what one graph of their whole forward calls."""
    return sum(isinstance(m, torch.nn.Linear) for model in models for m in model.modules())


def expect_linears(seen: int, models: tuple[torch.nn.Module, ...], what: str, fix: str, *, gate: bool = False) -> None:
    """The graphs a counting backend kept call ``seen`` linear layers (``grader.probing.linear_calls``): fewer than
    ``models`` hold means part of the model ran eagerly, whatever the frame counts or the timing say. ``gate``: a
    speed check's precondition, failed without a measurement (a count is not a speedup, in a report or its chart)."""
    from grader.registry import Shortfall

    want = linear_layers(*models)
    if seen < want:
        message = f"{what}: {seen} of the model's {want} linear layers called, the rest ran eagerly. {fix}"
        if gate:
            raise AssertionError(message)
        raise Shortfall(message, measured=seen, required=want)
