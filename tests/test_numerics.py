"""The float precision switches learner code may not move (``grader.numerics``): read, compared by meaning, set back,
and a probe that moved them failed with a message that names the switch."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from coursekit.profile import get_profile
from grader import numerics, probing
from grader.learner_failures import LearnerFailure
from grader.local_learner import LocalLearner

SWITCHES: dict[str, tuple[Callable[[], object], str]] = {
    "set_float32_matmul_precision('high')": (
        lambda: torch.set_float32_matmul_precision("high"),
        "float32 matmuls on CUDA (cuBLAS): tf32",
    ),
    "set_float32_matmul_precision('medium')": (
        lambda: torch.set_float32_matmul_precision("medium"),
        "float32 matmuls on the CPU (oneDNN): bf16",
    ),
    "cuda.matmul.allow_tf32": (
        lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
        "float32 matmuls on CUDA (cuBLAS): tf32",
    ),
    "cudnn.allow_tf32 off": (
        lambda: setattr(torch.backends.cudnn, "allow_tf32", False),
        "float32 convolutions on CUDA (cuDNN): ieee",
    ),
    "fp32_precision = 'tf32'": (
        lambda: setattr(torch.backends, "fp32_precision", "tf32"),
        "float32 matmuls on CUDA (cuBLAS): tf32",
    ),
    "mkldnn.matmul.fp32_precision = 'bf16'": (
        lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),
        "float32 matmuls on the CPU (oneDNN): bf16",
    ),
    "allow_bf16_reduced_precision_reduction off": (
        lambda: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False),
        "allow_bf16_reduced_precision_reduction",
    ),
    "autocast left open": (lambda: torch.autocast("cpu").__enter__(), "autocast on cpu: on"),
}


@pytest.fixture
def pinned() -> Iterator[dict]:
    """This process's settings, set back after the test whatever it did."""
    settings = numerics.settings()
    yield settings
    numerics.restore(settings)


@pytest.mark.parametrize("switch", list(SWITCHES))
def test_a_moved_switch_is_named_and_set_back(pinned: dict, switch: str) -> None:
    move, named = SWITCHES[switch]
    move()
    found = numerics.changes(pinned)
    assert any(named in f for f in found), found
    assert named in numerics.message(found)
    numerics.restore(pinned)
    assert numerics.changes(pinned) == [] and numerics.settings() == pinned
    torch.get_float32_matmul_precision()  # no "mixed legacy and new API" error once set back


def test_a_switch_set_to_its_default_is_no_change(pinned: dict) -> None:
    torch.set_float32_matmul_precision("highest")  # writes "ieee" where the table said "none": the same meaning
    torch.backends.cudnn.allow_tf32 = True
    with torch.autocast("cpu"):
        pass
    assert numerics.changes(pinned) == []


@probing.probe("test.numerics.call")
def _call(call: probing.Call) -> probing.Reply:
    call.get("fn")()
    return probing.Reply({"called": True})


def test_an_in_notebook_check_fails_when_learner_code_moved_a_switch(pinned: dict) -> None:
    learner = LocalLearner({"fn": lambda: torch.set_float32_matmul_precision("high")}, "ex00", get_profile("smoke"))
    with pytest.raises(LearnerFailure, match="float32 precision settings"):
        learner.ask("test.numerics.call")
    assert numerics.changes(pinned) == []  # the learner's kernel gets its own settings back
    learner.namespace["fn"] = lambda: None
    assert learner.ask("test.numerics.call").values == {"called": True}
