"""The free-disk floor under which a worker is stopped depends on what was free when its scratch folder was made: a
nearly full grading disk (CI after installing torch) still grades, and learner code still cannot fill it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from coursekit.profile import get_profile
from grader import learner as learner_module
from grader import worker_limits
from grader.learner import RemoteLearner
from grader.learner_failures import WorkerLost
from grader.runner import sandbox_report
from grader.worker_limits import MIN_FREE_DISK, Limits, disk_floor, scratch_bytes

MiB = 1024**2


def test_the_floor_is_a_gibibyte_or_half_of_what_was_free() -> None:
    assert disk_floor(50 * 1024 * MiB) == MIN_FREE_DISK
    assert disk_floor(600 * MiB) == 300 * MiB
    assert disk_floor(0) == 0


def _learner_on_a_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: list[int], wrote: list[int | None] | None = None
) -> RemoteLearner:
    """A learner whose disk reports ``free[0]`` bytes free (change it to play a submission writing), and whose
    scratch folder holds ``wrote[0]`` bytes (by default, all that went from the disk: this worker wrote it)."""
    start = free[0]
    monkeypatch.setattr(learner_module.shutil, "disk_usage", lambda path: SimpleNamespace(free=free[0]))
    monkeypatch.setattr(
        learner_module, "scratch_bytes", lambda folder: (start - free[0]) if wrote is None else wrote[0]
    )
    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "no-seed")
    limits = Limits(memory_bytes=1 << 30, check_timeout_s=10)
    learner = RemoteLearner([], "ex00", get_profile("smoke"), limits, report=sandbox_report("off"), workdir=tmp_path)
    learner._new_scratch()
    return learner


def test_a_nearly_full_disk_grades_until_learner_code_fills_half_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    free = [600 * MiB]  # less than MIN_FREE_DISK before any learner code ran
    learner = _learner_on_a_disk(tmp_path, monkeypatch, free)
    assert "only 600 MiB free" in capsys.readouterr().err, "the grader says why its disk allowance is small"
    learner._check_limits()  # nothing written yet: no stop (the old absolute floor stopped every worker here)
    free[0] = 320 * MiB
    learner._check_limits()
    free[0] = 290 * MiB  # the submission wrote more than half of what was free
    with pytest.raises(WorkerLost, match="filled the disk"):
        learner._check_limits()


def test_on_a_roomy_disk_the_floor_is_a_gibibyte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    free = [40 * 1024 * MiB]
    learner = _learner_on_a_disk(tmp_path, monkeypatch, free)
    free[0] = MIN_FREE_DISK + MiB
    learner._check_limits()
    free[0] = MIN_FREE_DISK - MiB
    with pytest.raises(WorkerLost, match="filled the disk"):
        learner._check_limits()


def test_a_classmate_who_wrote_little_is_not_stopped_for_anothers_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The floor is the machine's (red team, session 32): another submission filling a shared disk would have had
    every worker graded beside it stopped with "your code filled the disk". A worker is stopped only if its own
    scratch folder grew by at least ``BLAME_MIN_BYTES`` and a quarter of what went, or holds files it cannot count."""
    free, wrote = [40 * 1024 * MiB], [0]
    learner = _learner_on_a_disk(tmp_path, monkeypatch, free, wrote)
    free[0] = MIN_FREE_DISK - MiB  # the disk went below the floor: someone else's 39 GiB
    wrote[0] = 10 * MiB  # this worker wrote its compile caches
    learner._check_limits()
    wrote[0] = 10 * 1024 * MiB  # a quarter of what went: it did its share
    with pytest.raises(WorkerLost, match="filled the disk"):
        learner._check_limits()
    free[0] = 40 * 1024 * MiB
    wrote[0] = 0
    learner = _learner_on_a_disk(tmp_path, monkeypatch, free, wrote)
    free[0] = MIN_FREE_DISK - MiB
    wrote[0] = None  # too many files to count, or hidden ones
    with pytest.raises(WorkerLost, match="filled the disk"):
        learner._check_limits()


def test_what_learner_code_prints_to_its_workers_log_counts_against_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team, session 33: 500 MiB printed at load, and a worker ended in each check so that the next started with
    a log of its own: the disk filled from outside the scratch folder, and no one was to blame. A new worker's start
    removes the old logs, and what the current one holds counts as written."""
    free, wrote = [40 * 1024 * MiB], [0]
    learner = _learner_on_a_disk(tmp_path, monkeypatch, free, wrote)
    (tmp_path / "worker-1.log").write_bytes(b"x" * MiB)
    (tmp_path / "notes.txt").write_bytes(b"x" * MiB)
    assert MiB <= worker_limits.log_bytes(tmp_path) < 2 * MiB, "the workers' logs, nothing else"
    printed = [0]
    monkeypatch.setattr(learner_module, "log_bytes", lambda workdir: printed[0])
    free[0] = MIN_FREE_DISK - MiB
    learner._check_limits()  # someone else's files
    printed[0] = 10 * 1024 * MiB
    with pytest.raises(WorkerLost, match="filled the disk"):
        learner._check_limits()


def test_a_scratch_folder_is_measured_by_the_blocks_it_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "data").write_bytes(b"x" * (3 * MiB))
    with (tmp_path / "sparse").open("wb") as fh:  # 1 GiB long, nothing written: no blocks
        fh.truncate(1024 * MiB)
    assert 3 * MiB <= scratch_bytes(tmp_path) < 4 * MiB
    assert scratch_bytes(tmp_path, cap=2) is None, "past the cap: not counted, to blame"
    real = worker_limits.os.scandir

    def hidden(path):  # a folder learner code took its permissions from
        if str(path).endswith("b"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(worker_limits.os, "scandir", hidden)
    assert scratch_bytes(tmp_path) is None


# learner code that writes to a file it deleted: no walk of its scratch folder finds those bytes
WRITE_UNLINKED = """
import os


def _hold():
    held = open("held.bin", "wb")
    os.unlink("held.bin")
    held.write(os.urandom(4 * 1024 * 1024))
    held.flush()
    os.fsync(held.fileno())
    return held


HELD = _hold()
"""


@pytest.mark.slow
def test_bytes_written_to_a_deleted_file_still_count_against_their_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open, unlink, write: the disk fills and the scratch folder looks empty. The judge also counts the deleted
    files its worker's processes hold open (``containment.unlinked_bytes``), here in a real sandboxed worker."""
    import os

    from grader import containment

    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "no-seed")
    limits = Limits(memory_bytes=4 << 30, check_timeout_s=30)
    report = sandbox_report("prefer")
    with RemoteLearner([WRITE_UNLINKED], "ex00", get_profile("smoke"), limits, report=report, workdir=tmp_path) as lrn:
        lrn.start()
        assert not lrn.problems, lrn.problems
        scratch = lrn._scratch
        assert scratch_bytes_of(scratch) < MiB, "the folder shows nothing"
        held = containment.unlinked_bytes(lrn.pids(), os.stat(scratch).st_dev)
        assert held is not None and held >= 4 * MiB, held
        assert containment.unlinked_bytes(lrn.pids(), os.stat(scratch).st_dev + 1) == 0, "another disk's: not counted"


def scratch_bytes_of(folder: Path) -> int:

    return scratch_bytes(folder) or 0
