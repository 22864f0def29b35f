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
    in a student's folder is skipped with a warning, and so is a student folder that is a link. A notebook lying
    directly in ``source``, or one whose name does not start with its exercise's number, is skipped with a warning
    that says what to do (a learning platform's download renames files). Where a student has two notebooks of one
    exercise, the newer is taken, as ``grader batch`` does."""
    from grader.interface import NOTEBOOKS, exercise_for, loose_notebook, not_an_exercise
    from grader.loader import NotebookError, submission_bytes

    loose = sorted(source.glob("*.ipynb"))
    for notebook in loose:
        print(f"warning: {notebook}: {loose_notebook(notebook, source)}; skipped", file=sys.stderr)
    if loose:
        print(
            f"warning: {len(loose)} notebook(s) lie directly in {source}, not in a folder per student: collect reads "
            f"{source}/<student>/NN_topic.ipynb, and the folder's name is the student's id in the gradebook",
            file=sys.stderr,
        )
    count = 0
    for student in sorted(p for p in source.iterdir() if p.is_dir()):
        if student.is_symlink():
            print(f"warning: {student}: a student folder that is a symbolic link; skipped", file=sys.stderr)
            continue
        if problem := id_problem(student.name):
            print(f"warning: {student}: {problem}; skipped", file=sys.stderr)
            continue
        taken: set[str] = set()
        for notebook in sorted(student.rglob("*.ipynb"), key=_newest_first):  # rglob follows no linked folder
            if ".ipynb_checkpoints" in notebook.parts:
                continue
            exercise = exercise_for(notebook)
            if exercise is None:
                print(f"warning: {notebook}: {not_an_exercise(notebook)}; skipped", file=sys.stderr)
                continue
            if exercise in taken:
                print(f"warning: {notebook}: {student.name} has a newer {exercise} notebook; skipped", file=sys.stderr)
                continue
            try:
                content = submission_bytes(notebook)
            except NotebookError as exc:
                print(f"warning: {notebook}: {exc}; skipped", file=sys.stderr)
                continue
            taken.add(exercise)
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


def _newest_first(path: Path) -> tuple[float, str]:
    try:
        modified = path.lstat().st_mtime
    except OSError:
        modified = 0.0
    return -modified, str(path)
