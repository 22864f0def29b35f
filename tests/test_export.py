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
