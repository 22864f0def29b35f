"""nbgrader, which ``make autograde`` runs in the course folder, grades with this checkout's grader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="tools.classroom is instructor tooling: nbgrader is not in the compat venv")

import tools.classroom.course as courses  # noqa: E402


def test_nbgrader_imports_the_grader_of_the_checkout_it_was_started_from(tmp_path: Path, monkeypatch) -> None:
    """Two clones sharing one virtual environment: the editable install points at one of them, and nbgrader, run in
    a course folder, must still import ``grader`` from the clone whose ``make autograde`` started it."""
    clone = tmp_path / "clone"
    (clone / "grader").mkdir(parents=True)
    (clone / "grader" / "__init__.py").write_text("")
    course = tmp_path / "course"
    course.mkdir()
    monkeypatch.setattr(courses, "ROOT", clone)
    found = subprocess.run(
        [sys.executable, "-c", "import grader; print(grader.__file__)"],
        cwd=course,
        env=courses.course_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found) == clone / "grader" / "__init__.py", found


def test_a_course_config_that_fails_to_load_stops_nbgrader(tmp_path: Path) -> None:
    """traitlets logs a config file that raises and goes on with the defaults: nbgrader's Execute step would then grade
    each submission by running it in a kernel, unsandboxed, instead of the grader's isolated runner."""
    (tmp_path / "nbgrader_config.py").write_text('raise ImportError("a broken course config")\n')
    with pytest.raises(SystemExit, match="a broken course config"):
        courses.nbgrader(tmp_path, "db", "student", "list", quiet=True)


def test_nbgrader_runs_without_its_arguments_on_its_command_line(tmp_path: Path) -> None:
    """A grading worker can read every process's ``/proc/<pid>/cmdline``: autograde's, which select students by id,
    must not name them. nbgrader reads its arguments from stdin, and still runs them."""
    args = ("autograde", "ex02", "--student=alice-privately", "--CourseDirectory.student_id_exclude=bob,carol")
    cmd, stdin = courses.nbgrader_command(args)
    shown = " ".join(cmd)
    assert not any(name in shown for name in ("alice", "bob", "carol", "autograde")), shown
    assert "alice-privately" in stdin
    proc = courses.nbgrader(tmp_path, "--help-all", quiet=True)
    assert "CourseDirectory.student_id_exclude" in proc.stdout, proc.stdout[-500:]
