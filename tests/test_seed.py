"""Grading a reference solution seeds every later worker's compile cache, whatever its exercise, with kernels only."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit.profile import get_profile
from grader import learner as learner_module
from grader.learner import RemoteLearner
from grader.runner import sandbox_report
from grader.worker_limits import Limits

KERNEL = Path("inductor/ab/cab123.so")
GRAPH = Path("inductor/fxgraph/xy/fxgraph-entry")  # a cached graph carries the source lines that compiled it
HEADER = Path("tmp/torchinductor_someone/precompiled_headers/c0ffee.h.gch")


def _learner(exercise: str, workdir: Path) -> RemoteLearner:
    workdir.mkdir(parents=True, exist_ok=True)
    limits = Limits(memory_bytes=1 << 30, check_timeout_s=10)
    return RemoteLearner([], exercise, get_profile("smoke"), limits, report=sandbox_report("off"), workdir=workdir)


def test_one_reference_grading_seeds_every_exercise_with_its_kernels_and_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "seed")
    first = _learner("ex03", tmp_path / "a")
    scratch = first._new_scratch()
    for path in (KERNEL, GRAPH, HEADER):
        (scratch / path).parent.mkdir(parents=True, exist_ok=True)
        (scratch / path).write_text(path.name)
    first.harvest()

    other = _learner("ex01", tmp_path / "b")  # another exercise: the header and kernels do not depend on it
    seeded = other._new_scratch()
    assert (seeded / KERNEL).read_text() == KERNEL.name
    assert (seeded / HEADER).is_file(), "the precompiled header is built once, for every exercise"
    assert not (seeded / GRAPH).exists(), "cached graphs are never seeded"
    cold = other._new_scratch(seeded=False)  # a check that times compiling: the header only
    assert (cold / HEADER).is_file() and not (cold / KERNEL).exists()
