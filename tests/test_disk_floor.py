"""The free-disk floor under which a worker is stopped depends on what was free when its scratch folder was made: a
nearly full grading disk (CI after installing torch) still grades, and learner code still cannot fill it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from coursekit.profile import get_profile
from grader import learner as learner_module
from grader.learner import MIN_FREE_DISK, Limits, RemoteLearner, WorkerLost, disk_floor
from grader.runner import sandbox_report

MiB = 1024**2


def test_the_floor_is_a_gibibyte_or_half_of_what_was_free() -> None:
    assert disk_floor(50 * 1024 * MiB) == MIN_FREE_DISK
    assert disk_floor(600 * MiB) == 300 * MiB
    assert disk_floor(0) == 0


def _learner_on_a_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: list[int]) -> RemoteLearner:
    """A learner whose disk reports ``free[0]`` bytes free (change it to play a submission writing)."""
    monkeypatch.setattr(learner_module.shutil, "disk_usage", lambda path: SimpleNamespace(free=free[0]))
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
