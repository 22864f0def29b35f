"""nbgrader preprocessors for ``make autograde`` (named in the course's ``nbgrader_config.py``).

nbgrader keeps what it is good at (release, collect, the gradebook, feedback, export); the grade itself comes
from the same isolated runner as ``python -m grader``. The submitted notebook is never executed:

* ``RestoreLockedCells`` (sanitize step, before nbgrader's ``OverwriteCells``): every locked cell of the
  released notebook that the learner deleted is put back, every edited one is reset, and a notes cell at the
  top of the graded notebook says what was repaired;
* ``IsolatedGrade`` (autograde step, in place of nbgrader's ``Execute``): the judge grades the notebook's
  definitions in a sandboxed worker (``grader.runner.grade_notebook``) and writes each check's verdict into its
  check cell as output: the record ``make feedback`` reads, the text a learner sees, and an error output for a
  failed check, which is how nbgrader's ``SaveAutoGrades`` gives that cell zero. No learner code runs in a
  kernel, so redefining ``run_check``, ``print`` or ``AssertionError`` in a cell changes nothing.

Instructor-side only: nothing here ships in the learner kit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

import nbformat
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.loader import nbgrader_metadata
from grader.restore import add_notes_cell, read_notes, restore_locked_cells

UNSANDBOXED_ENV = "GRADER_UNSANDBOXED"  # set by `make autograde UNSANDBOXED=1` (tools/classroom/autograde.py)


def _released(preprocessor: NbGraderPreprocessor, resources: dict) -> Path:
    info = resources["nbgrader"]
    coursedir = CourseDirectory(config=preprocessor.config)
    folder = coursedir.format_path(coursedir.release_directory, ".", info["assignment"])
    return Path(folder) / f"{info['notebook']}.ipynb"


class ExpectedChecksumChange(logging.Filter):
    """Drops nbgrader's ``Attribute 'checksum' for cell ... has changed!`` for the cells of hidden checks: their
    released text lacks the hidden checks their source holds, so nbgrader's ``OverwriteCells`` says so for every one
    of them in every submission, and then puts the source back, as it should. A learner's real edits are in the notes
    cell (``RestoreLockedCells``); the warning still shows for any other cell."""

    MESSAGE = "Attribute '%s' for cell %s has changed!"

    def __init__(self) -> None:
        super().__init__()
        self.cells: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        expected = str(record.msg).startswith(self.MESSAGE) and args[:1] == ("checksum",)
        return not (expected and len(args) > 1 and args[1] in self.cells)

    @classmethod
    def on(cls, log: logging.Logger | logging.LoggerAdapter, released) -> None:
        """Install it on ``log`` (once) for the hidden checks' cells of the ``released`` notebook."""
        from grader.registry import get

        logger = log.logger if isinstance(log, logging.LoggerAdapter) else log
        found = next((f for f in logger.filters if isinstance(f, cls)), None)
        if found is None:
            found = cls()
            logger.addFilter(found)
        found.cells = set()
        for cell in released.cells:
            cid = check_id(cell)
            with contextlib.suppress(KeyError):
                if cid and not get(cid).public:
                    found.cells.add(str(nbgrader_metadata(cell).get("grade_id")))


class RestoreLockedCells(NbGraderPreprocessor):
    """Put back deleted locked cells and reset edited ones, from the released notebook."""

    def preprocess(self, nb, resources):
        path = _released(self, resources)
        if not path.is_file():
            self.log.warning("no released notebook at %s: locked cells not checked", path)
            add_notes_cell(nb, [])  # still: no notes cell the learner wrote survives
            return nb, resources
        released = nbformat.read(path, as_version=4)
        ExpectedChecksumChange.on(self.log, released)  # OverwriteCells, next, logs through the same logger
        notes = restore_locked_cells(nb, released)
        for note in notes:
            self.log.warning("%s: %s", resources["nbgrader"].get("student"), note)
        add_notes_cell(nb, notes)
        return nb, resources


def check_id(cell) -> str | None:
    """The check a grade cell stands for (its nbgrader grade id, with dots)."""
    meta = nbgrader_metadata(cell)
    if cell.get("cell_type") != "code" or not meta.get("grade"):
        return None
    return str(meta.get("grade_id", "")).replace("-", ".")


def verdict_outputs(result, check, ctx) -> list:
    """A check cell's outputs for ``result``: the text and structured record, and an error when it failed."""
    from grader.notebook import RESULT_MIME, describe

    text, record = describe(result, check, ctx)
    outputs = [nbformat.v4.new_output("display_data", data={"text/plain": text, RESULT_MIME: record})]
    if not result.passed:
        outputs.append(
            nbformat.v4.new_output(
                "error", ename="AssertionError", evalue=result.message, traceback=[f"AssertionError: {result.message}"]
            )
        )
    return outputs


class IsolatedGrade(NbGraderPreprocessor):
    """Grade the notebook with the isolated runner and write every check's verdict into its cell."""

    def preprocess(self, nb, resources):
        from coursekit.cache import use_repo_compile_cache
        from coursekit.profile import get_profile
        from grader.context import Context
        from grader.interface import exercise_for
        from grader.registry import get
        from grader.results import CheckResult
        from grader.runner import NotebookGrade, SandboxRequired, grade_notebook
        from grader.scan import Flag

        use_repo_compile_cache()
        name = f"{resources['nbgrader']['notebook']}.ipynb"
        exercise = exercise_for(Path(name))
        ids = [cid for cid in (check_id(c) for c in nb.cells) if cid]
        if exercise is None or not ids:
            self.log.warning("%s: not an exercise notebook with checks; nothing graded", name)
            return nb, resources
        profile = get_profile()
        ctx = Context.create(profile)
        with tempfile.TemporaryDirectory(prefix="autograde-") as tmp:
            path = Path(tmp) / name
            nbformat.write(nb, path)
            try:
                grade = grade_notebook(
                    path,
                    exercise,
                    profile,
                    ctx.secret,
                    check_ids=ids,
                    ctx=ctx,
                    progress=False,
                    sandbox_policy="off" if os.environ.get(UNSANDBOXED_ENV) else "require",
                    check_timeout_s=float(os.environ.get("GRADER_CHECK_TIMEOUT") or 0) or None,
                )
            except SandboxRequired:
                raise
            except Exception as exc:  # noqa: BLE001 - a zero that says so, not a student missing from the gradebook
                self.log.error("%s: the grader failed on this notebook: %r", name, exc)
                message = f"the grader could not grade this notebook ({exc!r}); flagged for an instructor"
                grade = NotebookGrade(str(path), exercise, [CheckResult.failed(get(c), message) for c in ids])
                grade.flags.append(Flag(0, 0, "protocol", message).as_dict())
        results = {r.id: r for r in grade.results}
        for cell in nb.cells:
            cid = check_id(cell)
            if cid in results:
                cell.outputs = verdict_outputs(results[cid], get(cid), ctx)
                cell.execution_count = None
        notes = [*read_notes(nb)]
        if grade.sandbox.startswith("NO SANDBOX"):
            notes.append(grade.sandbox)
        notes += [f"flagged for review: {f['message']}" for f in grade.flags if f.get("kind") == "protocol"]
        notes += [  # what the static scan saw (grader.scan), as grader batch reports it: for the instructor to read
            f"flagged for review: code cell {f['cell']}, line {f['line']}: {f['message']}"
            for f in grade.flags
            if f.get("kind") != "protocol"
        ][:20]
        notes += [f"note: {p}" for p in grade.problems[:20]]
        if notes != read_notes(nb):
            add_notes_cell(nb, notes)
        self.log.info("%s: %g / %g points (%s)", name, grade.score, grade.max_score, grade.sandbox)
        return nb, resources
