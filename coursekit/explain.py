"""What Dynamo made of a function: graphs, breaks and a short reason for each break."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

# Dynamo's break reasons name its internals ("generic_jump TensorVariable()"); these say what the code did
GLOSSES: tuple[tuple[str, str], ...] = (
    (
        "generic_jump",
        "Python branches on a tensor's value here (if, while, and/or/not on a tensor): Dynamo cannot pick a branch "
        "without running the code. Compute both sides and choose with torch.where, or decide outside compiled code",
    ),
    (
        "Tensor.item()",
        "a tensor's value becomes a Python number here (.item(), int(t), float(t)), so the graph stops to compute "
        "it. Keep it a tensor, or read it outside the compiled code",
    ),
    (
        "Tensor.tolist()",
        "a tensor becomes a Python list here, so the graph stops to compute it. Keep it a tensor, or convert it "
        "outside the compiled code",
    ),
    (
        "Data-dependent",
        "the code's path or an output's shape depends on a tensor's values, which Dynamo cannot know while tracing",
    ),
    (
        "graph_break()",
        "an explicit torch._dynamo.graph_break() call",
    ),
)


def gloss(reason: str) -> str:
    """What a Dynamo break reason means in plain words ("" when it is not one we know)."""
    return next((text for key, text in GLOSSES if key in reason), "")


def short_reason(reason) -> str:
    """A break reason's first line, where it happened and, for a reason we know, what it means in plain words:
    ``why (file.py:line: code): meaning``."""
    text = reason.reason.strip().splitlines()[0]
    if reason.user_stack:
        frame = reason.user_stack[-1]
        text += f" ({Path(frame.filename).name}:{frame.lineno}: {(frame.line or '').strip()})"
    meaning = gloss(text)
    return f"{text}: {meaning}" if meaning else text


def break_count(explanation) -> int:
    """The graph breaks in a ``torch._dynamo.explain`` result. torch 2.14 can list a break reason and count 0
    breaks (a branch whose taken side runs no operation), so the larger of the two is the count."""
    return max(explanation.graph_break_count, len(explanation.break_reasons))


def explain_counts(fn: Callable, *args) -> dict:
    """``torch._dynamo.explain(fn)(*args)`` boiled down: graphs, breaks and short reasons."""
    explanation = torch._dynamo.explain(fn)(*args)
    return {
        "graphs": explanation.graph_count,
        "breaks": break_count(explanation),
        "reasons": [short_reason(r) for r in explanation.break_reasons],
    }
