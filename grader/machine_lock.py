"""One speed measurement at a time on this machine, whatever else is being graded.

Every judge holds the lock *shared* while it runs a check and *exclusive* while it runs a speed check, so a
speed check waits until the other judges on the machine (``grader batch --workers N``, ``make autograde
JOBS=N``, parallel test processes) finish the check they are in, and none starts another until it is done.
A check timed beside another submission's compile would measure that compile. Waiting judges go first in
arrival order of exclusive requests (a turnstile), so a stream of short checks cannot starve a speed check.

The lock files live in a folder only the judges use (``$GRADER_LOCK_DIR``, default ``<tmp>/tcip-grader-<uid>``):
learner code, confined to its scratch folder, can neither open nor remove them. ``GRADER_LOCK=off`` disables it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

LOCK_ENV, DIR_ENV = "GRADER_LOCK", "GRADER_LOCK_DIR"


def _folder() -> Path:
    folder = Path(os.environ.get(DIR_ENV) or Path(tempfile.gettempdir()) / f"tcip-grader-{os.getuid()}")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _off() -> bool:
    return os.environ.get(LOCK_ENV, "").lower() in ("off", "0", "no", "false")


@contextlib.contextmanager
def checking(exclusive: bool) -> Iterator[None]:
    """Hold the machine's grading lock for one check: ``exclusive`` for a speed check, shared otherwise."""
    if _off():
        yield
        return
    folder = _folder()
    gate, main = folder / "gate.lock", folder / "main.lock"
    with contextlib.ExitStack() as stack:
        with _flock(gate, fcntl.LOCK_EX):  # the turnstile: taken briefly by readers, held by a waiting writer
            stack.enter_context(_flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH))
        yield
