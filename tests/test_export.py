"""``make export ASSIGNMENT='ex00 ex02'``: only the assignments a class was set (nbgrader's export lists every
released one, 0 where nothing was handed in, which an LMS import reads as missed work)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="tools.classroom is instructor tooling: nbgrader is not in the compat venv")

import tools.classroom.export as exporting  # noqa: E402
from grader import spreadsheet  # noqa: E402


def test_export_keeps_only_the_assignments_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_nbgrader(course: Path, *args: str, **_: object) -> None:
        to = Path(args[-1].split("=", 1)[1])
        rows = [["assignment", "student_id", "score", "max_score"]]
        rows += [[a, "alice", "1.0", "2.0"] for a in ("ex00", "ex01", "ex02")]
        with to.open("w", newline="") as fh:
            csv.writer(fh).writerows(rows)

    checks = [{"student": "alice", "assignment": a, "check": f"{a}.x", "points": 1} for a in ("ex00", "ex01", "ex02")]
    monkeypatch.setattr(exporting, "nbgrader", fake_nbgrader)
    monkeypatch.setattr(exporting, "graded_scores", lambda course: checks)
    grades, by_check = exporting.export(tmp_path, ["ex00", "ex02"])
    assert [r["assignment"] for r in csv.DictReader(grades.open())] == ["ex00", "ex02"]
    assert [r["assignment"] for r in csv.DictReader(by_check.open())] == ["ex00", "ex02"]
    header = next(csv.reader(by_check.open()))
    assert header == ["student", "assignment", *spreadsheet.CHECK_COLUMNS, "notes"], "the batch summary's columns"
    grades, by_check = exporting.export(tmp_path)
    assert [r["assignment"] for r in csv.DictReader(grades.open())] == ["ex00", "ex01", "ex02"]


def test_export_lists_collected_submissions_no_grade_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Collected but not autograded, or handed in again since: nbgrader's export leaves the first out and shows the
    old grade for the second, so export says so, with a row each (instructor walkthrough, session 40)."""
    from tools.classroom.autograde import GradedLedger, read_submissions
    from tools.classroom.learners import REFUSED_FILE

    def hand_in(student: str, text: str, graded: bool = False) -> None:
        for stage in ("submitted", "autograded") if graded else ("submitted",):
            notebook = tmp_path / stage / student / "ex02" / "02_graph_breaks.ipynb"
            notebook.parent.mkdir(parents=True, exist_ok=True)
            notebook.write_text(text)

    for student in ("alice", "carol"):
        hand_in(student, '{"cells": []}', graded=True)
    ledger = GradedLedger(tmp_path)
    for student in ("alice", "carol"):
        ledger.set("ex02", student, read_submissions(tmp_path, "ex02", [student])[0][student])
    ledger.save()
    hand_in("carol", '{"cells": [], "again": 1}')  # handed in again after grading
    hand_in("bob", '{"cells": []}')  # collected after autograde ran
    hand_in("dave", '{"cells": []}')  # refused by autograde: listed by refused_submissions instead
    (tmp_path / REFUSED_FILE).write_text('{"ex02": {"dave": "too large"}}')
    monkeypatch.setattr(exporting, "nbgrader", lambda course, *args, **_: Path(args[-1].split("=", 1)[1]).touch())
    monkeypatch.setattr(exporting, "graded_scores", lambda course: [])
    _, by_check = exporting.export(tmp_path)
    rows = {r["student"]: r["message"] for r in csv.DictReader(by_check.open()) if r["check"] == "submission"}
    assert set(rows) == {"bob", "carol", "dave"}, rows
    assert rows["bob"].startswith("collected, not autograded yet") and "earlier submission's grade" in rows["carol"]
    err = capsys.readouterr().err
    assert "warning: 2 collected submission(s) are not in these grades" in err and "run make autograde" in err, err
