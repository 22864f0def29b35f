"""One speed measurement at a time on this machine, whatever else is being graded.

Every judge holds the lock *shared* while it runs a check and *exclusive* while it runs a speed check, so a
speed check waits until the other judges on the machine (``grader batch --workers N``, ``make autograde
JOBS=N``, parallel test processes) finish the check they are in, and none starts another until it is done.
A check timed beside another submission's compile would measure that compile. Waiting judges go first in
arrival order of exclusive requests (a turnstile), so a stream of short checks cannot starve a speed check.

While a judge holds the lock exclusively, the grading workers of every *other* judge are frozen too (``SIGSTOP``):
their judges are waiting for the lock, so those workers have no request to answer, but learner code in them may
have left threads or processes running, which would otherwise share the CPU with the measurement. Each judge
lists its live workers in ``<folder>/workers/`` (process id and start time, so a reused process id is never hit),
and only processes carrying the grader's sandbox are stopped.

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
_timing_here = 0  # how many exclusive holds this process is inside (its own speed checks)


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


def register_worker(pid: int) -> None:
    """List a live grading worker of this judge, with when it started (``unregister_worker`` when it ends)."""
    if _off():
        return
    from grader import containment

    with contextlib.suppress(OSError):
        if (started := containment.start_ticks(pid)) is None:
            return
        folder = _folder() / "workers"
        folder.mkdir(mode=0o700, exist_ok=True)
        (folder / str(pid)).write_text(f"{os.getpid()} {started}")


def unregister_worker(pid: int) -> None:
    with contextlib.suppress(OSError):
        (_folder() / "workers" / str(pid)).unlink()


def _other_workers() -> set[int]:
    """Live grading workers of other judges on this machine (checked against their recorded start, in clock ticks
    since boot: a pid alone may have passed to another process)."""
    import psutil

    from grader import containment

    found: set[int] = set()
    for entry in (_folder() / "workers").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            judge, started = entry.read_text().split()
            pid = int(entry.name)
            if int(judge) != os.getpid() and containment.start_ticks(pid) == int(started):
                containment.track(pid, int(started))  # every later look-up checks it is still that process
                found.add(pid)
                continue
            if not psutil.pid_exists(int(judge)):
                entry.unlink()  # left behind by a judge that died
    return found


@contextlib.contextmanager
def checking(exclusive: bool) -> Iterator[None]:
    """Hold the machine's grading lock for one check: ``exclusive`` for a speed check (other judges' workers
    frozen meanwhile), shared otherwise."""
    if _off():
        yield
        return
    from grader import containment

    folder = _folder()
    gate, main = folder / "gate.lock", folder / "main.lock"
    with contextlib.ExitStack() as stack:
        with _flock(gate, fcntl.LOCK_EX):  # the turnstile: taken briefly by readers, held by a waiting writer
            stack.enter_context(_flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH))
        if exclusive:
            stack.enter_context(containment.stopped(_other_workers(), sandboxed_only=True))
            stack.enter_context(_counted())
        yield


@contextlib.contextmanager
def _counted() -> Iterator[None]:
    global _timing_here
    _timing_here += 1
    try:
        yield
    finally:
        _timing_here -= 1


@contextlib.contextmanager
def unless_timing() -> Iterator[bool]:
    """Inside the block, True unless another judge on this machine is running a speed check; while True, none can
    start one until the block ends (the shared side held without waiting). This judge's own speed check gives True:
    its timed regions keep out what they must themselves (``RemoteLearner.quiet``). With the lock off, always
    True."""
    if _off() or _timing_here:
        yield True
        return
    gate = os.open(_folder() / "gate.lock", os.O_RDWR | os.O_CREAT, 0o600)
    main = os.open(_folder() / "main.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:  # through the turnstile, as a reader: never ahead of a judge waiting to time
            fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(main, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        finally:
            os.close(gate)
        yield True
    finally:
        os.close(main)
