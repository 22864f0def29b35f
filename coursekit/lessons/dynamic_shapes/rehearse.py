"""Exercise 4's stream-time check, rehearsed in your own kernel: ``rehearse_stream(compile_tagger, collate)``.

The hidden check times a cold stream of ``STREAM_BATCHES`` batches of ``STREAM_ROWS`` rows, compiles included, with
the ``STREAM_BACKEND`` backend: your ``compile_tagger`` over your ``collate``'s padded batches against
``NaiveTagger`` compiled with ``dynamic=False`` on the unpadded ones (``static_stream``, the grader's own baseline).
This runs both here (``coursekit.rehearse.cold_ratio``): a guide, not a grade.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coursekit.lessons.dynamic_shapes.givens import (
    STREAM_BACKEND,
    STREAM_BATCHES,
    STREAM_ROWS,
    NaiveTagger,
    batch_of,
    length_stream,
)
from coursekit.profile import get_profile
from coursekit.rehearse import Rehearsal, cold_ratio

Batches = list[list[torch.Tensor]]


def static_stream(model: nn.Module, stream: Batches, device: str | torch.device, backend: str = STREAM_BACKEND) -> None:
    """The grader's baseline: ``model`` (a ``NaiveTagger``) compiled from a fresh state with static shapes, then
    every batch of sequences, unpadded, in order."""
    torch.compiler.reset()
    compiled = torch.compile(model, dynamic=False, backend=backend)
    with torch.no_grad():
        for seqs in stream:
            compiled(torch.stack(seqs).to(device))


def your_stream(
    compile_tagger: Callable, collate: Callable, model: nn.Module, stream: Batches, device: str | torch.device,
    backend: str = STREAM_BACKEND,
) -> None:  # fmt: skip
    """The timed side of the check: ``compile_tagger(model, backend=...)`` from a fresh state, then every batch
    through ``collate`` and the compiled model, in order."""
    torch.compiler.reset()
    compiled = compile_tagger(model, backend=backend)
    with torch.no_grad():
        for seqs in stream:
            tokens, mask = collate(seqs)
            compiled(tokens.to(device), mask.to(device))


def rehearse_stream(
    compile_tagger: Callable, collate: Callable, tagger: Callable[[], nn.Module], *, trials: int = 3, seed: int = 0,
    show: bool = True,
) -> Rehearsal:  # fmt: skip
    """Time a cold stream of random lengths (``seed``) through ``compile_tagger`` and ``collate`` with a fresh
    ``tagger()`` (your ``MaskedTagger``), against the grader's statically compiled ``NaiveTagger``, ``trials``
    times each, on the profile's device and threads."""
    device = get_profile().device
    stream = [batch_of(n, STREAM_ROWS, seed + i) for i, n in enumerate(length_stream(STREAM_BATCHES, seed))]
    naive, yours = NaiveTagger().to(device), tagger().to(device)
    return cold_ratio(
        lambda: static_stream(naive, stream, device),
        lambda: your_stream(compile_tagger, collate, yours, stream, device),
        what=f"a cold stream of {STREAM_BATCHES} batches of {STREAM_ROWS} rows ({STREAM_BACKEND}, compiles included)",
        baseline_name="NaiveTagger, dynamic=False",
        trials=trials,
        device=device,
        show=show,
    )
