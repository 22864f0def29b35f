"""``collect``: learners' notebooks into nbgrader's ``submitted/`` folder, notebook files only."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from tools.classroom.learners import id_problem


def collect(course: Path, source: Path) -> int:
    """Copy ``source/<student>/**/NN_*.ipynb`` into nbgrader's ``submitted/<student>/exNN/<released name>``. Only
    notebook files are copied: a symbolic link (to a solution, to a classmate's work), a folder, a pipe or a device
    in a student's folder is skipped with a warning, and so is a student folder that is a link."""
    from grader.interface import NOTEBOOKS, exercise_for
    from grader.loader import NotebookError, submission_bytes

    count = 0
    for student in sorted(p for p in source.iterdir() if p.is_dir()):
        if student.is_symlink():
            print(f"warning: {student}: a student folder that is a symbolic link; skipped", file=sys.stderr)
            continue
        if problem := id_problem(student.name):
            print(f"warning: {student}: {problem}; skipped", file=sys.stderr)
            continue
        for notebook in sorted(student.rglob("*.ipynb")):  # rglob follows no linked folder
            if ".ipynb_checkpoints" in notebook.parts:
                continue
            exercise = exercise_for(notebook)
            if exercise is None:
                print(f"warning: {notebook}: not an exercise notebook (NN_topic.ipynb); skipped", file=sys.stderr)
                continue
            try:
                content = submission_bytes(notebook)
            except NotebookError as exc:
                print(f"warning: {notebook}: {exc}; skipped", file=sys.stderr)
                continue
            target = course / "submitted" / student.name / exercise / NOTEBOOKS[exercise]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # a link left there earlier is replaced, never written through
            target.write_bytes(content)
            with contextlib.suppress(OSError):
                modified = notebook.lstat().st_mtime
                os.utime(target, (modified, modified))
            count += 1
    print(f"collected {count} notebook(s) into {course / 'submitted'}")
    return count
