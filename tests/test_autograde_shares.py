"""``make autograde JOBS=n`` deals the class to n nbgrader processes, each grading its share in one process, and on
CUDA each on a GPU of its own."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="tools.classroom is instructor tooling: nbgrader is not in the compat venv")

import tools.classroom.autograde as autograding  # noqa: E402
import tools.classroom.collect as collecting  # noqa: E402
import tools.classroom.course as courses  # noqa: E402
import tools.classroom.export as exporting  # noqa: E402
import tools.classroom.feedback as feedbacks  # noqa: E402
import tools.classroom.learners as learners  # noqa: E402
from tools.classroom.autograde import gpu_jobs, share_options, shares  # noqa: E402


class _Gradebook:
    """The gradebook's one call autograde makes itself: the learners it enrols (nbgrader records the rest)."""

    def __init__(self) -> None:
        self.students: list[str] = []

    def update_or_create_student(self, student: str) -> None:
        self.students.append(student)


def _stand_in_for_nbgrader(monkeypatch: pytest.MonkeyPatch, fake_nbgrader, gpus: list[str] | None = None) -> _Gradebook:
    """``classroom.autograde`` with ``fake_nbgrader`` in nbgrader's place, a sandbox, ``gpus`` (none: a CPU), and a
    stand-in gradebook, returned."""
    report = type("Report", (), {"describe": lambda self: "sandboxed (test)"})()
    gradebook = _Gradebook()
    monkeypatch.setattr("grader.runner.sandbox_report", lambda policy: report)
    monkeypatch.setattr(autograding, "nbgrader", fake_nbgrader)
    monkeypatch.setattr(autograding, "gpu_jobs", lambda jobs: gpu_jobs(jobs, gpus) if gpus else (jobs, []))
    monkeypatch.setattr(autograding, "gradebook", lambda course: contextlib.nullcontext(gradebook))
    monkeypatch.setattr(autograding, "autograde_summary", lambda course, graded: [])
    return gradebook


def test_students_are_dealt_round_robin_and_each_share_is_selected_exactly() -> None:
    students = ["aaron", "alice", "bob", "carol", "dave"]
    dealt = shares(students, 2)
    assert dealt == [["aaron", "bob", "dave"], ["alice", "carol"]]
    assert share_options(dealt[0], students) == ["--CourseDirectory.student_id_exclude=alice,carol"]
    assert share_options(["bob"], students) == ["--student=bob"]
    assert share_options(students, students) == []  # one share: the whole class
    assert shares(students[:1], 4) == [["aaron"]]  # no empty share starts a process


def test_a_student_id_with_a_comma_gets_a_process_of_its_own() -> None:
    # nbgrader splits student_id_exclude at commas: such an id could not be excluded from the other shares
    assert shares(["a,b", "c", "d"], 2) == [["a,b"], ["c"], ["d"]]
    assert share_options(["a,b"], ["a,b", "c"]) == ["--student=a,b"]


def test_on_cuda_jobs_are_cut_to_the_gpus_and_on_cpu_they_stand(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_jobs(3, ["0", "1"]) == (2, ["0", "1"])
    assert "each takes a GPU of its own and 2 are visible: grading 2 at a time" in capsys.readouterr().out
    assert gpu_jobs(1, ["4", "5"]) == (1, ["4"])
    assert gpu_jobs(4, []) == (4, [])  # CPU: nothing printed, nothing cut
    assert capsys.readouterr().out == ""


def test_no_two_nbgrader_processes_share_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five processes (a comma in an id gives each learner one) through a pool of two, on two GPUs: a process
    starts only on a GPU that no running process holds, and every process gets one."""
    students = ["a,b", "carol", "dave", "erin", "frank"]
    for student in students:
        (tmp_path / "submitted" / student / "ex01").mkdir(parents=True)
    holders: dict[str, str] = {}
    seen: list[str] = []
    lock = threading.Lock()

    def fake_nbgrader(course: Path, *args: str, env: dict | None = None, **_: object) -> None:
        gpu = (env or {}).get("CUDA_VISIBLE_DEVICES")
        with lock:
            assert gpu in ("0", "1"), f"a process started without a GPU of its own ({gpu!r})"
            assert gpu not in holders, f"GPU {gpu} given to {args[-1]} while {holders.get(gpu)} held it"
            holders[gpu] = args[-1]
            seen.append(gpu)
        time.sleep(0.05)
        with lock:
            del holders[gpu]

    _stand_in_for_nbgrader(monkeypatch, fake_nbgrader, gpus=["0", "1"])
    autograding.autograde(tmp_path, ["ex01"], jobs=3, force=False)
    assert len(seen) == len(students) and set(seen) == {"0", "1"}


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_assignment_nbgrader_fails_on_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """Red team, session 30: one notebook that made nbgrader exit 1 for ex00 left ex05 ungraded for the whole class.
    Every assignment is graded; the failures are listed at the end, and the exit says so."""
    for assignment in ("ex00", "ex05"):
        for student in ("alice", "mallory"):
            (tmp_path / "submitted" / student / assignment).mkdir(parents=True)
    graded: list[str] = []

    def fake_nbgrader(course: Path, *args: str, **_: object) -> None:
        graded.append(args[1])
        if args[1] == "ex00":
            raise SystemExit("`nbgrader autograde ex00` failed (exit 1)")

    _stand_in_for_nbgrader(monkeypatch, fake_nbgrader)
    with pytest.raises(SystemExit, match=r"(?s)nbgrader reported errors.*ex00: `nbgrader autograde ex00` failed"):
        autograding.autograde(tmp_path, ["ex00", "ex05"], jobs=jobs, force=False)
    assert "ex05" in graded, "the assignment after the one that failed was never graded"


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_notebook_nbgrader_must_not_open_is_left_out_and_the_class_is_graded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], jobs: int
) -> None:
    """nbgrader reads every submitted notebook whole before the grader sees it: 94 MiB of ``[],`` took a process to
    5.6 GB (red team, session 30), and nbgrader's exchange copies whatever was handed in. Such a notebook, or a
    link, is not handed to nbgrader; the instructor is told why, and the rest of the class is graded."""
    from grader import loader

    name = "00_orientation.ipynb"
    for student in ("alice", "bob", "links", "mallory"):
        (tmp_path / "submitted" / student / "ex00").mkdir(parents=True)
    for student in ("alice", "bob"):
        (tmp_path / "submitted" / student / "ex00" / name).write_text('{"cells": []}')
    (tmp_path / "submitted" / "mallory" / "ex00" / name).write_text("[" + "[]," * 50 + "[]]")
    (tmp_path / "submitted" / "links" / "ex00" / name).symlink_to(tmp_path / "submitted" / "alice" / "ex00" / name)
    monkeypatch.setattr(loader, "MAX_JSON_VALUES", 20)
    selected: list[list[str]] = []

    def fake_nbgrader(course: Path, *args: str, **_: object) -> None:
        selected.append(list(args[2:]))

    _stand_in_for_nbgrader(monkeypatch, fake_nbgrader)
    autograding.autograde(tmp_path, ["ex00"], jobs=jobs, force=False)
    excluded = "--CourseDirectory.student_id_exclude="
    graded = set()
    for options in selected:
        (option,) = options
        graded |= (
            {option.removeprefix("--student=")}
            if option.startswith("--student=")
            else ({"alice", "bob", "links", "mallory"} - set(option.removeprefix(excluded).split(",")))
        )
    assert graded == {"alice", "bob"}, selected
    err = capsys.readouterr().err
    assert "not autograded" in err and "mallory: " in err and "JSON values" in err, err
    assert "links: " in err and "symbolic link" in err, err


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_notebook_handed_in_again_after_grading_is_graded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], jobs: int
) -> None:
    """nbgrader skips a submission it graded before, so a learner who handed in again kept the old grade unless the
    instructor remembered FORCE=1 (instructor walkthrough, session 31). Autograde now remembers what it graded."""
    everyone = ["alice", "bob", "carol"]
    name = "00_orientation.ipynb"
    for student in everyone:
        (tmp_path / "submitted" / student / "ex00").mkdir(parents=True)
        (tmp_path / "submitted" / student / "ex00" / name).write_text(f'{{"cells": [], "by": "{student}"}}')
    graded: list[str] = []

    def fake_nbgrader(course: Path, *args: str, **_: object) -> None:
        """nbgrader's rule: a selected student is graded if never graded before, or with --force."""
        options = [a for a in args[2:] if a != "--force"]
        chosen = set(everyone)
        for option in options:
            if option.startswith("--student="):
                chosen = {option.removeprefix("--student=")}
            else:
                chosen -= set(option.split("=", 1)[1].split(","))
        for student in sorted(chosen):
            done = course / "autograded" / student / "ex00"
            if "--force" in args or not done.is_dir():
                done.mkdir(parents=True, exist_ok=True)
                (done / name).write_text("{}")
                graded.append(student)

    _stand_in_for_nbgrader(monkeypatch, fake_nbgrader)
    autograding.autograde(tmp_path, ["ex00"], jobs=jobs, force=False)
    assert sorted(graded) == everyone
    graded.clear()
    autograding.autograde(tmp_path, ["ex00"], jobs=jobs, force=False)
    assert graded == [], "nothing was handed in again, so nothing is graded again"
    (tmp_path / "submitted" / "bob" / "ex00" / name).write_text('{"cells": [], "by": "bob, fixed"}')
    capsys.readouterr()
    autograding.autograde(tmp_path, ["ex00"], jobs=jobs, force=False)
    assert graded == ["bob"], graded
    assert "handed in again since graded, so graded again: bob" in capsys.readouterr().out
    graded.clear()
    autograding.autograde(tmp_path, ["ex00"], jobs=jobs, force=True)
    assert sorted(graded) == everyone, "FORCE=1 still regrades the whole class"
    # a class graded before autograde kept a record: taken as graded as it is, and said so; resubmissions after that
    # are caught
    (tmp_path / ".tcip-autograded.json").unlink()
    graded.clear()
    autograding.autograde(tmp_path, ["ex00"], jobs=jobs, force=False)
    assert graded == [] and "FORCE=1` once" in capsys.readouterr().out
    (tmp_path / "submitted" / "carol" / "ex00" / name).write_text('{"cells": [], "by": "carol, fixed"}')
    autograding.autograde(tmp_path, ["ex00"], jobs=jobs, force=False)
    assert graded == ["carol"], graded


def test_a_submission_nbgrader_must_not_open_is_listed_in_the_export_and_explained_in_feedback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Left out of nbgrader, such a submission had no row in the grades and no feedback page (session 31's note). Now
    the export lists it and why, and its learner's feedback says so; a learner graded before keeps that grade, and
    the note says which results stand."""
    import csv

    import nbformat

    from grader import loader

    name = "00_orientation.ipynb"
    for student in ("bob", "carol", "mallory"):
        (tmp_path / "submitted" / student / "ex00").mkdir(parents=True)
    (tmp_path / "submitted" / "bob" / "ex00" / name).write_text('{"cells": []}')
    (tmp_path / "submitted" / "mallory" / "ex00" / name).write_text("[" + "[]," * 50 + "[]]")
    (tmp_path / "submitted" / "carol" / "ex00" / name).symlink_to(tmp_path / "submitted" / "bob" / "ex00" / name)
    earlier = tmp_path / "autograded" / "carol" / "ex00" / name  # carol's earlier, readable submission, graded
    earlier.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), earlier)
    monkeypatch.setattr(loader, "MAX_JSON_VALUES", 20)
    gradebook = _stand_in_for_nbgrader(monkeypatch, lambda course, *args, **_: None)
    autograding.autograde(tmp_path, ["ex00"], jobs=1, force=False)
    assert sorted(gradebook.students) == ["carol", "mallory"], "enrolled: nbgrader's export gives them a row"
    err = capsys.readouterr().err
    assert "mallory: the submission was not graded (" in err and "scores zero" in err, err
    assert "carol: the latest submission was not graded (" in err and "earlier submission stands" in err, err
    assert set(learners.refused_submissions(tmp_path)["ex00"]) == {"carol", "mallory"}

    def fake_export(course: Path, *args: str, **_: object) -> None:
        if args[0] == "export":
            Path(args[1].split("=", 1)[1]).write_text("assignment,student_id,score\nex00,bob,9\n")

    for module in (exporting, feedbacks):
        monkeypatch.setattr(module, "nbgrader", fake_export)
        monkeypatch.setattr(module, "graded_scores", lambda course: [])
    graded = tmp_path / "autograded" / "bob" / "ex00" / name  # what nbgrader, a stand-in here, writes for bob
    graded.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), graded)
    _, by_check = exporting.export(tmp_path)
    rows = {r["student"]: r for r in csv.DictReader(by_check.open())}
    assert rows["mallory"]["check"] == "submission" and "JSON values" in rows["mallory"]["message"]
    assert "scores zero" in rows["mallory"]["notes"] and "earlier submission stands" in rows["carol"]["notes"]
    assert "bob" not in rows
    feedbacks.feedback(tmp_path)
    page = (tmp_path / "feedback" / "mallory" / "ex00" / "checks.html").read_text()
    assert "ex00: not graded" in page and "JSON values" in page and "<table>" not in page
    assert "earlier submission stands" in (tmp_path / "feedback" / "carol" / "ex00" / "checks.html").read_text()
    assert "not graded" in (tmp_path / "feedback" / "mallory" / "index.html").read_text()
    (tmp_path / "submitted" / "mallory" / "ex00" / name).write_text('{"cells": []}')  # handed in again, readable
    monkeypatch.setattr(autograding, "nbgrader", lambda course, *args, **_: None)
    autograding.autograde(tmp_path, ["ex00"], jobs=1, force=False)
    assert set(learners.refused_submissions(tmp_path)["ex00"]) == {"carol"}


def test_a_learner_id_nbgrader_reads_as_a_pattern_is_refused_and_a_half_graded_classmate_is_graded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Red team, session 32: nbgrader reads a learner id as a file pattern. A folder named ``*`` selected every
    classmate's notebook; alice's grading failed half way, leaving her graded folder without a notebook, and nbgrader
    and autograde's record then took her as graded for good (no row in the gradebook). Now such an id is never
    collected nor handed to nbgrader, and a folder without a graded notebook is graded again and not recorded."""
    name = "00_orientation.ipynb"
    source = tmp_path / "inbox"
    for student in ("alice", "bob", "*", "b[o]b"):
        (source / student).mkdir(parents=True)
        (source / student / name).write_text('{"nbformat": 4, "cells": []}')
    course = tmp_path / "course"
    assert collecting.collect(course, source) == 2
    err = capsys.readouterr().err
    assert "'*' holds *, which nbgrader reads as a file pattern" in err and "'b[o]b' holds [ ]" in err, err
    (course / "submitted" / "*" / "ex00").mkdir(parents=True)  # handed in through nbgrader's exchange instead
    (course / "submitted" / "*" / "ex00" / name).write_text("{}")
    (course / "autograded" / "alice" / "ex00").mkdir(parents=True)  # an earlier grading that failed half way
    calls: list[list[str]] = []
    fail_alice = [True]

    def fake_nbgrader(course_dir: Path, *args: str, **_: object) -> None:
        calls.append(list(args))
        chosen = {"alice", "bob", "*"}
        for option in args[2:]:
            if option.startswith("--student="):
                chosen = {option.removeprefix("--student=")}
            elif option.startswith("--CourseDirectory.student_id_exclude="):
                chosen -= set(option.split("=", 1)[1].split(","))
        for student in chosen:
            done = course_dir / "autograded" / student / "ex00"
            if "--force" in args or not done.is_dir():
                done.mkdir(parents=True, exist_ok=True)
                if not (student == "alice" and fail_alice[0]):
                    (done / name).write_text("{}")

    _stand_in_for_nbgrader(monkeypatch, fake_nbgrader)
    autograding.autograde(course, ["ex00"], jobs=1, force=False)
    out, err = capsys.readouterr()
    assert "left half graded by an earlier run, so graded again: alice" in out, out
    assert all("*" not in option for call in calls for option in call if option.startswith("--student=")), calls
    assert "'*' holds *" in err and not (course / "autograded" / "*").exists()
    ledger = autograding.GradedLedger(course)
    assert ledger.get("ex00", "bob") and ledger.get("ex00", "alice") is None, "alice's notebook was never written"
    fail_alice[0] = False
    calls.clear()
    autograding.autograde(course, ["ex00"], jobs=1, force=False)
    assert (course / "autograded" / "alice" / "ex00" / name).is_file() and calls
    assert autograding.GradedLedger(course).get("ex00", "alice")


def test_a_notebook_nbconvert_takes_minutes_to_render_costs_only_its_own_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Red team, session 32: one learner's Markdown (1 MB of ``[a](``) would keep ``nbgrader generate_feedback`` busy
    for about 50 minutes, and no learner got a page until it ended. The class's run has a budget; past it each
    learner is rendered alone, within its own, and every learner still gets checks.html."""
    import subprocess

    import nbformat

    name = "00_orientation.ipynb"
    for student in ("alice", "bob", "mallory"):
        graded = tmp_path / "autograded" / student / "ex00"
        graded.mkdir(parents=True)
        nbformat.write(nbformat.v4.new_notebook(), graded / name)
    (tmp_path / "source" / "ex00").mkdir(parents=True)
    runs: list[tuple[str, float | None]] = []

    def slow_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        args = json.loads(str(kwargs["input"]))  # nbgrader reads its arguments from stdin (course.nbgrader_command)
        who = next((a.removeprefix("--student=") for a in args if a.startswith("--student=")), "class")
        runs.append((who, kwargs.get("timeout")))
        if who in ("class", "mallory"):  # mallory's page never finishes, so neither does the class's run
            raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout") or 0)
        out = tmp_path / "feedback" / who / "ex00"
        out.mkdir(parents=True, exist_ok=True)
        (out / "00_orientation.html").write_text("<html></html>")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", slow_run)
    monkeypatch.setattr(feedbacks, "graded_scores", lambda course: [])
    feedbacks.feedback(tmp_path)
    budget = feedbacks.FEEDBACK_START_SECONDS + 3 * feedbacks.FEEDBACK_SECONDS
    assert runs == [("class", budget)] + [(s, feedbacks.FEEDBACK_START_SECONDS) for s in ("alice", "bob", "mallory")]
    err = capsys.readouterr().err
    assert f"took over {budget:g} s and was stopped; rendering each learner's notebook alone" in err, err
    assert "ex00  mallory: `nbgrader generate_feedback ex00 --force --student=mallory` took over 60 s" in err, err
    for student in ("alice", "bob", "mallory"):
        page = (tmp_path / "feedback" / student / "ex00" / "checks.html").read_text()
        assert ("00_orientation.html" in page) == (student != "mallory"), student


def test_nbgrader_runs_with_its_own_sqlalchemy_warnings_silenced_and_the_instructors_filters_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONWARNINGS", "error::DeprecationWarning")
    assert courses.course_env()["PYTHONWARNINGS"] == "error::DeprecationWarning,ignore::Warning:nbgrader.api"
    monkeypatch.delenv("PYTHONWARNINGS")
    assert courses.course_env()["PYTHONWARNINGS"] == "ignore::Warning:nbgrader.api"


def test_the_gradebook_summary_adds_up_each_learners_points_and_failed_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lines ``make autograde`` ends with, from the rows ``make export`` writes (the same columns)."""
    rows = [
        {"student": "alice", "assignment": "ex02", "check": "ex02.a", "points": 2.0, "max_points": 2, "passed": True},
        {"student": "alice", "assignment": "ex02", "check": "ex02.b", "points": 0.0, "max_points": 3, "passed": False},
        {"student": "bob", "assignment": "ex03", "check": "ex03.a", "points": 1.0, "max_points": 1, "passed": True},
    ]
    monkeypatch.setattr(autograding, "graded_scores", lambda course: rows)
    assert autograding.autograde_summary(Path("course"), ["ex02"]) == ["  ex02  alice  2 / 5 points, 1 check(s) failed"]
    monkeypatch.setattr(autograding, "graded_scores", lambda course: [])
    assert autograding.autograde_summary(Path("course"), ["ex02"]) == ["  nothing graded yet"]
