"""The nbgrader course folder: its configuration, its gradebook, and nbgrader run inside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tools.make_exercises import nbgrader_env

ROOT = Path(__file__).resolve().parents[2]  # the checkout


COURSE_ID = "tcip"


CONFIG = """\
# The nbgrader configuration of this course directory, written by tools/classroom (course.py) on first use.
# Edit freely: it is not rewritten while it exists.
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds, GetGrades,
                                    IgnorePattern, LimitOutput, OverwriteCells, OverwriteKernelspec, SaveAutoGrades)

from grader.nbgrader_hooks import IsolatedGrade, RestoreLockedCells

c = get_config()  # noqa: F821 - provided by traitlets
here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = here
c.CourseDirectory.course_id = "{course_id}"
# The gradebook: SQLite beside this file unless GRADEBOOK_URL names another SQLAlchemy URL
# (postgresql://user@host/db, mysql+pymysql://...).
c.CourseDirectory.db_url = os.environ.get("GRADEBOOK_URL") or "sqlite:///" + os.path.join(here, "gradebook.db")
c.OverwriteCells.add_missing_cells = True
# Put back deleted locked cells and reset edited ones (reported in a notes cell).
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreLockedCells,
                                      OverwriteCells, CheckCellMetadata]
# The grade comes from the grader's isolated runner (a judge process and a sandboxed worker), never from
# executing the notebook: IsolatedGrade takes the place of nbgrader's Execute and writes each check's verdict
# into its cell, which SaveAutoGrades then records. Each check stops after GRADER_CHECK_TIMEOUT seconds.
c.Autograde.autograde_preprocessors = [IsolatedGrade, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
# Feedback pages render each learner's Markdown: HTML in it (a <script>, an <img onerror=...>) is escaped by
# nbconvert's SanitizeHTML (bleach), never run in the browser of whoever opens the page. nbgrader's feedback
# template ignores HTMLExporter.sanitize_html, so the preprocessor joins nbgrader's own two.
c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, SanitizeHTML]
c.SanitizeHTML.enabled = True  # nbconvert's preprocessors are off until enabled
"""


def course_dir(path: str | None) -> Path:
    return Path(path or os.environ.get("COURSE") or ROOT / "course").resolve()


def ensure_course(course: Path) -> None:
    """Create the course folder and its ``nbgrader_config.py`` (kept once it exists)."""
    course.mkdir(parents=True, exist_ok=True)
    config = course / "nbgrader_config.py"
    if not config.exists():
        config.write_text(CONFIG.format(course_id=COURSE_ID))


def db_url(course: Path) -> str:
    """The gradebook URL, read from the course's config exactly as nbgrader reads it."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    return str(config.CourseDirectory.db_url)


NBGRADER_WARNINGS = "ignore::Warning:nbgrader.api"


def course_env() -> dict[str, str]:
    """nbgrader's environment, with this checkout first on ``PYTHONPATH``: nbgrader runs in the course folder, where
    ``grader`` and ``coursekit`` would otherwise come from wherever the virtual environment's editable install points
    (another clone, when two share one ``.venv``), and grade with that clone's checks."""
    env = nbgrader_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # a course config that fails to load stops nbgrader: traitlets would log it and go on with nbgrader's defaults,
    # whose Execute step runs each submission in a kernel, unsandboxed, in place of the grader's isolated runner
    env["TRAITLETS_APPLICATION_RAISE_CONFIG_FILE_ERROR"] = "1"
    # nbgrader's gradebook code sets off SQLAlchemy's "not in session, add operation ... will not proceed" warnings
    # on every submission it records, three per learner: nbgrader's own noise, not the course's
    env["PYTHONWARNINGS"] = ",".join(w for w in (env.get("PYTHONWARNINGS"), NBGRADER_WARNINGS) if w)
    return env


# nbgrader's arguments travel on its standard input, not its command line: any process, a grading worker included,
# can read every other's /proc/<pid>/cmdline, and autograde's name the students a process grades
NBGRADER_FROM_STDIN = (
    "import json, sys\n"
    "sys.argv = ['nbgrader', *json.loads(sys.stdin.readline())]\n"
    "from nbgrader.apps.nbgraderapp import main\n"
    "main()\n"
)


def nbgrader_command(args: tuple[str, ...] | list[str]) -> tuple[list[str], str]:
    """The command line that runs ``nbgrader ARGS`` (which names no argument) and what to write to its stdin."""
    return [sys.executable, "-c", NBGRADER_FROM_STDIN], json.dumps(list(args)) + "\n"


def nbgrader(
    course: Path, *args: str, quiet: bool = False, env: dict | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course folder; raise with its output if it fails or outlasts ``timeout`` s."""
    cmd, stdin = nbgrader_command(args)
    try:
        proc = subprocess.run(
            cmd,
            input=stdin,
            cwd=course,
            env={**course_env(), **(env or {})},
            text=True,
            capture_output=quiet,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(f"`nbgrader {' '.join(args)}` took over {timeout:g} s and was stopped") from None
    if proc.returncode:
        raise SystemExit(
            f"`nbgrader {' '.join(args)}` failed (exit {proc.returncode})"
            + (f":\n{proc.stdout}{proc.stderr}" if quiet else "")
        )
    return proc


def assignments(course: Path) -> list[str]:
    return sorted(p.name for p in (course / "source").glob("ex[0-9][0-9]") if p.is_dir())


def gradebook(course: Path):
    from nbgrader.api import Gradebook

    return Gradebook(db_url(course), COURSE_ID)
