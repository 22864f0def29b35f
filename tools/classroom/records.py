"""Each check's record, read back from the autograded notebooks and the gradebook."""

from __future__ import annotations

from pathlib import Path

import nbformat

from tools.classroom.course import gradebook

RESULT_MIME = "application/vnd.coursekit.check+json"


def check_records(notebook: Path) -> tuple[dict[str, dict], list[str]]:
    """``{check id: record}`` from an autograded notebook's check cells, and the grader's notes on it."""
    from grader.restore import read_notes

    nb = nbformat.read(notebook, as_version=4)
    records = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        cid = meta["grade_id"].replace("-", ".")
        record = next(
            (
                o["data"][RESULT_MIME]
                for o in cell.get("outputs", [])
                if o.get("output_type") == "display_data" and RESULT_MIME in o.get("data", {})
            ),
            None,
        )
        if record is None:
            error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
            why = (
                f"the cell stopped before the check ran: {error['ename']}: {error['evalue']}"
                if error
                else "the check did not run"
            )
            record = {
                "id": cid,
                "passed": False,
                "points": 0,
                "max_points": meta.get("points", 0),
                "measured": None,
                "required": None,
                "message": why,
                "kind": "",
                "title": "",
            }
        records[cid] = record
    return records, read_notes(nb)


def graded_scores(course: Path) -> list[dict]:
    """One row per (student, assignment, check) from the gradebook, joined with the check records."""
    from nbgrader.api import MissingEntry

    rows = []
    with gradebook(course) as gb:
        for assignment in gb.assignments:
            for notebook in assignment.notebooks:
                for student in gb.students:
                    path = course / "autograded" / student.id / assignment.name / f"{notebook.name}.ipynb"
                    records, notes = check_records(path) if path.is_file() else ({}, [])
                    for cell in notebook.grade_cells:
                        try:
                            grade = gb.find_grade(cell.name, notebook.name, assignment.name, student.id)
                        except MissingEntry:
                            continue
                        record = records.get(cell.name.replace("-", "."), {})
                        rows.append(
                            {
                                "student": student.id,
                                "assignment": assignment.name,
                                "check": cell.name.replace("-", "."),
                                "kind": record.get("kind", ""),
                                "points": grade.score,
                                "max_points": grade.max_score,
                                "passed": record.get("passed"),
                                "measured": record.get("measured"),
                                "required": record.get("required"),
                                "thresholds": record.get("thresholds"),
                                "message": record.get("message", ""),
                                "notes": "; ".join(notes),
                            }
                        )
    return rows
