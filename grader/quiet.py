"""Keep warnings off stderr while a check runs inside a notebook.

nbgrader gives zero to an autograde cell that writes anything to stderr, so a
harmless library warning (say, inductor noting that no CUDA runtime exists)
would zero a passing check.  ``stderr_to_stdout`` reroutes Python-level
stderr, ``warnings`` and logging stream handlers, and file-descriptor 2, then
replays what it caught on stdout, where it is still visible but harmless.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator


def _stderr_handlers() -> list[logging.StreamHandler]:
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    return [
        h
        for lg in loggers
        for h in lg.handlers
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__)
    ]


@contextlib.contextmanager
def stderr_to_stdout() -> Iterator[None]:
    """Everything written to stderr inside the block is printed to stdout after it."""
    buffer = io.StringIO()
    handlers = _stderr_handlers()
    old_streams = [h.stream for h in handlers]
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as fd_sink, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        os.dup2(fd_sink.fileno(), 2)
        for h in handlers:
            h.setStream(buffer)
        try:
            with contextlib.redirect_stderr(buffer):
                yield
        finally:
            for h, stream in zip(handlers, old_streams):
                h.setStream(stream)
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            fd_sink.seek(0)
            captured = fd_sink.read().decode(errors="replace") + buffer.getvalue()
            captured += "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    if captured.strip():
        print("(warnings during the check, shown here so they cannot zero it:)")
        print(captured.rstrip())


class PrintedTail(io.TextIOBase):
    """A stdout that keeps the last ``limit`` characters written to it and counts the lines: what a learner's code
    printed during a check, bounded however much it prints."""

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self.tail = ""
        self.lines = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        self.tail = (self.tail + text)[-self.limit :]
        return len(text)

    def last_lines(self, n: int) -> str:
        return "\n".join(self.tail.rstrip("\n").splitlines()[-n:])


@contextlib.contextmanager
def hold_stdout(limit: int = 20_000) -> Iterator[PrintedTail]:
    """What Python code prints inside the block goes to a ``PrintedTail`` instead of the cell's output."""
    held = PrintedTail(limit)
    with contextlib.redirect_stdout(held):
        yield held


# what the judge's own compiles log that is about the grader's code, never the learner's
JUDGE_COMPILE_LOGGERS = ("torch._dynamo", "torch._inductor", "torch.utils.cpp_extension")


@contextlib.contextmanager
def judge_compiles_quiet() -> Iterator[None]:
    """Only errors from Dynamo and Inductor while a check runs in the judge.

    The judge compiles its own baselines, such as exercise 2's given model with its graph break left in on purpose.
    Their warnings ("Graph break from `Tensor.item()`" in a lesson's ``givens.py``) went to the grading log beside a
    learner's name and read as the learner's fault. Learner code runs in the worker, whose logs this leaves alone;
    with ``TORCH_LOGS`` set, nothing is changed."""
    from coursekit.quiet import compile_warnings_off

    with compile_warnings_off(JUDGE_COMPILE_LOGGERS):
        yield
