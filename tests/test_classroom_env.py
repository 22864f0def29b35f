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
