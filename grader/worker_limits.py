"""What one grading worker may use (memory, threads and processes, disk), and how the judge measures what it
wrote. ``grader.learner.RemoteLearner`` polls these while it waits on a worker and, by a watch thread, between
requests."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MIN_FREE_DISK = 1024**3  # a worker that leaves less free disk than this is stopped (see disk_floor)
BLAME_MIN_BYTES = 64 * 1024**2  # ... if its scratch folder grew by this much, and by a quarter of what went (filled)
SCRATCH_ENTRIES = 100_000  # files and folders ``scratch_bytes`` reads at most; a scratch folder with more is to blame
MAX_TASKS_ENV = "GRADER_MAX_TASKS"


@dataclass
class Limits:
    """What one worker may use."""

    memory_bytes: int
    check_timeout_s: float
    min_free_disk: int = MIN_FREE_DISK
    max_tasks: int = field(default_factory=lambda: default_max_tasks())


def default_max_tasks() -> int:
    """Threads and processes a worker (with its children) may run at once: ``GRADER_MAX_TASKS``, else 512 or four a
    core if more. A reference grading peaks at 13 on a 2-core CPU (torch's threads, the compiler's ``g++``); a
    thread or fork bomb, which could take every process id on the machine from the other workers, is stopped."""
    return int(os.environ.get(MAX_TASKS_ENV) or max(512, 4 * (os.cpu_count() or 1)))


def disk_floor(free_at_start: int, min_free: int = MIN_FREE_DISK) -> int:
    """The free disk below which a worker is stopped: ``min_free``, or half of what was free when its scratch folder
    was made if that was less. A grading machine whose disk is already nearly full (CI after a large install) still
    grades, and learner code may fill at most half of what is left."""
    return min(min_free, free_at_start // 2)


def scratch_bytes(folder: Path, cap: int = SCRATCH_ENTRIES) -> int | None:
    """Bytes on disk under ``folder`` (its files' blocks: a sparse file counts what it holds), or None past ``cap``
    files and folders, where reading further would cost the judge more than an honest grading ever writes, or where
    a folder cannot be read (learner code may take its own folder's permissions away: what it hides counts as
    much)."""
    total, seen, folders = 0, 0, [folder]
    while folders:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > cap:
                        return None
                    with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(Path(entry.path))
        except FileNotFoundError:  # a folder removed meanwhile
            continue
        except OSError:
            return None
    return total


def log_bytes(workdir: Path) -> int:
    """Bytes on disk in the logs of the workers in ``workdir``, which hold whatever learner code printed (up to the
    file-size limit each): outside the scratch folder, yet written by the learner (red team, session 33: 500 MiB to
    stdout per worker, four workers, and no one was blamed for the disk)."""
    total = 0
    for log in workdir.glob("worker-*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += log.stat().st_blocks * 512
    return total


def filled(grew: int | None, went: int) -> bool:
    """Whether a worker whose scratch folder grew by ``grew`` bytes (None: too many files to count) is the one that
    took the disk below its floor, ``went`` bytes having gone from it since the folder was made. The floor is the
    machine's: a classmate graded beside it, writing little, is not stopped for another's files."""
    return grew is None or grew >= max(BLAME_MIN_BYTES, went // 4)


def default_memory_limit() -> int:
    """Bytes a worker (with its children) may hold: 60% of this machine's memory, at most 32 GiB."""
    return int(min(0.6 * psutil.virtual_memory().total, 32 * 1024**3))
