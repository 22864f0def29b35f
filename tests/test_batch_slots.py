"""The batch's local engine: a grading slot that dies costs only the submission that killed it, and only a few
submissions are read into memory at once.

A stand-in for ``grader.batch.grade_job`` runs in the pool's spawned slots (it must be importable, so it lives
here at module level): it returns a small report, or ends its process for the student named ``dies``, as a judge
killed by the kernel would.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from grader import batch

pytestmark = pytest.mark.slow  # each pool the engine starts spawns slots that import torch


def stand_in_grade(student: str) -> dict:
    if student == "dies":
        time.sleep(0.2)  # let the others be in flight with it
        os._exit(9)
    time.sleep(0.05)
    return {"student": student}


def _jobs(names: list[str]) -> list[batch.Job]:
    return [batch.Job(n, "ex00", Path(f"{n}.ipynb"), "", Path(f"{n}.json")) for n in names]


def test_a_slot_that_dies_costs_only_the_submission_that_killed_it() -> None:
    outcomes: dict[str, object] = {}
    names = ["ana", "ben", "dies", "eve", "kim", "lea"]
    batch.run_local(
        _jobs(names),
        lambda job: (job.student,),
        2,
        [],
        lambda job, out: outcomes.update({job.student: out}),
        fn=stand_in_grade,
    )
    assert sorted(outcomes) == sorted(names), "every submission gets a report, the one that killed its slot too"
    for name in names:
        if name == "dies":
            assert isinstance(outcomes[name], Exception) and "died twice" in str(outcomes[name]), outcomes[name]
        else:
            assert outcomes[name] == {"student": name}, f"{name} was graded: {outcomes[name]!r}"


def test_only_a_few_submissions_are_read_into_memory_at_once() -> None:
    workers = 2
    window = batch.QUEUED_PER_WORKER * workers
    read, done, most = [], [], [0]

    def make_args(job: batch.Job) -> tuple:
        read.append(job.student)
        most[0] = max(most[0], len(read) - len(done))
        return (job.student,)

    names = [f"s{i:02d}" for i in range(12)]
    batch.run_local(_jobs(names), make_args, workers, [], lambda job, out: done.append(out), fn=stand_in_grade)
    assert len(done) == len(names) and all(isinstance(d, dict) for d in done), done
    assert most[0] <= window, f"{most[0]} submissions were in memory at once; the engine queues at most {window}"


def test_the_batch_ends_with_a_score_table_of_the_class(tmp_path: Path) -> None:
    """One row per student, one column per exercise (instructor walkthrough, session 40: `make batch` printed only
    where its CSVs were)."""
    import json

    from rich.console import Console

    def job(student: str, exercise: str, report: dict | None) -> batch.Job:
        path = tmp_path / student / f"{exercise}.json"
        if report is not None:
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(report))
        return batch.Job(student, exercise, path, "", path)

    jobs = [
        job("alice", "ex01", {"score": 13, "max_score": 19, "integrity": []}),
        job("alice", "ex02", {"score": 14, "max_score": 14, "integrity": ["`setup` was deleted; it was put back"]}),
        job("bob", "ex01", None),
    ]
    console = Console(record=True, width=100)
    console.print(batch.score_table(jobs))
    text = console.export_text()
    lines = {line.split()[1]: line for line in text.splitlines() if line.split()[1:2] in (["alice"], ["bob"])}
    assert "13/19" in lines["alice"] and "14/14 *" in lines["alice"], text
    assert " - " in lines["bob"] and "*: notes in scores.csv" in text, text
