"""Exercise 6's capture-time check, rehearsed in your own kernel: ``rehearse_capture(compile_blocks)``.

The hidden check times a cold first training step of the lesson's ViT (``make_model``: ``DEPTH`` blocks), from a
fresh compile state with the ``aot_eager`` backend (Dynamo and AOTAutograd, forward and backward, no code
generation): your ``compile_blocks(model, (Block,), backend)`` against the whole model compiled with
``torch.compile``. This runs both here (``coursekit.rehearse.cold_ratio``): a guide, not a grade.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coursekit.lessons.compile_time.givens import Block, loss_fn, make_batch, make_model
from coursekit.profile import get_profile
from coursekit.rehearse import Rehearsal, cold_ratio

CAPTURE_BACKEND = "aot_eager"


def first_step(compile_model: Callable[[nn.Module], nn.Module], seed: int, device: str | torch.device) -> None:
    """A new ViT compiled by ``compile_model``, then one forward and backward: what the check times."""
    model = compile_model(make_model(seed, device))
    images, labels = make_batch(seed, device)
    loss_fn()(model(images), labels).backward()


def rehearse_capture(compile_blocks: Callable, *, trials: int = 3, seed: int = 0, show: bool = True) -> Rehearsal:
    """Time the cold first step with ``compile_blocks`` against the whole model compiled, ``trials`` times each,
    on the profile's device and threads."""
    device = get_profile().device
    return cold_ratio(
        lambda: first_step(lambda m: torch.compile(m, backend=CAPTURE_BACKEND), seed, device),
        lambda: first_step(lambda m: compile_blocks(m, (Block,), CAPTURE_BACKEND), seed, device),
        what=f"a cold first training step of the lesson's ViT ({CAPTURE_BACKEND})",
        baseline_name="whole model compiled",
        trials=trials,
        device=device,
        show=show,
    )
