"""Compiles of the course's own code, without their warnings: what a learner reads should be about their code."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

BASELINE_LOGGERS = ("torch._dynamo", "torch._inductor")


@contextlib.contextmanager
def compile_warnings_off(names: tuple[str, ...] = BASELINE_LOGGERS) -> Iterator[None]:
    """Only errors from the loggers ``names`` inside the block, for compiles of the grader's own code: exercise 4's
    static baseline hits the recompile limit on purpose, every trial, and its warnings read as the learner's mistake
    (a blind attendee, session 45); the judge uses it for its baselines too (``grader.quiet``). With
    ``TORCH_LOGS`` set, nothing is changed."""
    if os.environ.get("TORCH_LOGS"):
        yield
        return
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
