"""``export``: nbgrader's grades.csv, and one row per student and check in grades_by_check.csv."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from grader import spreadsheet
from tools.classroom.autograde import not_graded_yet
from tools.classroom.course import nbgrader
from tools.classroom.learners import refused_note, refused_submissions
from tools.classroom.records import graded_scores


def export(course: Path, which: list[str] | None = None) -> tuple[Path, Path]:
    """nbgrader's grade export (``grades.csv``) and one row per student and check (``grades_by_check.csv``); with
    ``which``, only those assignments (nbgrader lists every released one, 0 where nothing was handed in)."""
    grades = course / "grades.csv"
    nbgrader(course, "export", f"--CsvExportPlugin.to={grades}")
    with grades.open(newline="") as fh:  # its student ids are folder names a learner may have chosen
        table = list(csv.reader(fh))
    if which and table and "assignment" in table[0]:
        column = table[0].index("assignment")
        table = table[:1] + [row for row in table[1:] if len(row) > column and row[column] in which]
    with grades.open("w", newline="") as fh:
        csv.writer(fh).writerows([spreadsheet.cell(c) for c in row] for row in table)
    by_check = course / "grades_by_check.csv"
    rows = [r for r in graded_scores(course) if not which or r["assignment"] in which]
    for assignment, students in sorted(refused_submissions(course).items()):
        if which and assignment not in which:
            continue
        for student, why in sorted(students.items()):  # a row that says why, whatever the gradebook holds
            rows.append(
                {
                    "student": student,
                    "assignment": assignment,
                    "check": "submission",
                    "passed": False,
                    "message": why,
                    "notes": refused_note(course, assignment, student, why),
                }
            )
    waiting = not_graded_yet(course, which)
    for assignment, students in sorted(waiting.items()):
        for student, why in sorted(students.items()):
            rows.append(
                {"student": student, "assignment": assignment, "check": "submission", "passed": False, "message": why}
            )
    fields = ["student", "assignment", *spreadsheet.CHECK_COLUMNS, "notes"]
    with by_check.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(spreadsheet.row(r) for r in rows)
    print(f"wrote {grades} and {by_check} ({len(rows)} check rows)")
    if waiting:
        listed = [
            f"  {a}  {s}: {why}" for a, students in sorted(waiting.items()) for s, why in sorted(students.items())
        ]
        print(
            "\n".join(
                [
                    f"warning: {len(listed)} collected submission(s) are not in these grades (a row each in "
                    f"{by_check.name}); run make autograde, then make export again:",
                    *listed,
                ]
            ),
            file=sys.stderr,
        )
    return grades, by_check
