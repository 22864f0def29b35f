"""What Dynamo made of a function: graphs, breaks and a short reason for each break."""

from __future__ import annotations

import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


LIBRARIES = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def own_frame(stack: list) -> Any:
    """The innermost frame of ``stack`` outside Python's and the installed packages' files: the learner's line. A
    break inside a library call (``log.info`` inside ``forward``) was named at ``logging/__init__.py:2087``, a line
    no learner wrote (a blind attendee, session 45). The innermost frame where every frame is a library's."""
    own = [f for f in stack if not str(f.filename).startswith(LIBRARIES)]
    return (own or stack)[-1]


def short_reason(reason) -> str:
    """A break reason's first line, where it happened (the learner's own line, ``own_frame``) and, for a reason we
    know, what it means in plain words: ``why (file.py:line: code): meaning``."""
    text = reason.reason.strip().splitlines()[0]
    if reason.user_stack:
        frame = own_frame(reason.user_stack)
        text += f" ({Path(frame.filename).name}:{frame.lineno}: {(frame.line or '').strip()})"
    meaning = gloss(text)
    return f"{text}: {meaning}" if meaning else text


# torch's explain reports a function Dynamo gave up on as 0 graphs, -1 breaks and no reason (torch 2.11 and 2.14)
SKIPPED = (
    "Dynamo skipped the whole function: it runs eagerly, with no graph. A graph break inside a for or while loop "
    "does this (Dynamo cannot resume in the middle of a loop), so one print in a loop body turns compiling off "
    "for everything around it. TORCH_LOGS=graph_breaks names the line; move it out of the loop or remove it"
)


def skipped(explanation) -> bool:
    """Whether Dynamo gave up on the whole function (ran it eagerly), which explain reports as no graph and a break
    count of -1 rather than as a break."""
    return explanation.graph_count == 0 and explanation.graph_break_count < 0


def break_count(explanation) -> int:
    """The graph breaks in a ``torch._dynamo.explain`` result. torch 2.14 can list a break reason and count 0
    breaks (a branch whose taken side runs no operation), so the larger of the two is the count."""
    return max(explanation.graph_break_count, len(explanation.break_reasons))


def summarise(explanation) -> dict:
    """A ``torch._dynamo.explain`` result boiled down: graphs, breaks and short reasons. A function Dynamo skipped
    whole counts one break, with ``SKIPPED`` as its reason: it is not compiled at all, which is worse than any
    break, and a count of 0 would read as clean."""
    if skipped(explanation):
        return {"graphs": 0, "breaks": 1, "reasons": [SKIPPED]}
    return {
        "graphs": explanation.graph_count,
        "breaks": break_count(explanation),
        "reasons": [short_reason(r) for r in explanation.break_reasons],
    }


def explain_counts(fn: Callable, *args) -> dict:
    """``torch._dynamo.explain(fn)(*args)``, summarised (``summarise``)."""
    return summarise(torch._dynamo.explain(fn)(*args))
