"""Exercise 0's reference (instructor only): compiles counted after each call, on the torch that grades."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.testing import CompileCounter

from grader.exercises.ex00.probes import build_call


def compiles_after_each_call(fn: Callable, specs: list[list[dict[str, Any]]], dynamic: bool | None) -> list[int]:
    """Graphs Dynamo hands a counting backend, so far after each call of ``fn`` on each described call's arguments."""
    torch.compiler.reset()
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter, dynamic=dynamic)
    out = []
    for spec in specs:
        compiled(*build_call(spec))
        out.append(counter.frame_count)
    torch.compiler.reset()
    return out
