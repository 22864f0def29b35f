"""What Dynamo made of a function: graphs, breaks and a short reason for each break."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch


def short_reason(reason) -> str:
    """A break reason's first line and where it happened: ``why (file.py:line: code)``."""
    text = reason.reason.strip().splitlines()[0]
    if reason.user_stack:
        frame = reason.user_stack[-1]
        text += f" ({Path(frame.filename).name}:{frame.lineno}: {(frame.line or '').strip()})"
    return text


def explain_counts(fn: Callable, *args) -> dict:
    """``torch._dynamo.explain(fn)(*args)`` boiled down: graphs, breaks and short reasons."""
    explanation = torch._dynamo.explain(fn)(*args)
    return {
        "graphs": explanation.graph_count,
        "breaks": explanation.graph_break_count,
        "reasons": [short_reason(r) for r in explanation.break_reasons],
    }
