"""nbgrader preprocessors for ``make autograde`` (named in the course's ``nbgrader_config.py``).

They run in autograde's *sanitize* step, around nbgrader's own ``OverwriteCells``
(which puts back the hidden tests and the text of edited check cells):

* ``RestoreLockedCells`` (before it): every locked cell of the released notebook
  that the learner deleted is put back, every edited one is reset, and a notes cell
  at the top of the graded notebook says what was repaired;
* ``DefinitionsOnly`` (after it): the learner's own cells keep only their
  definitions, as ``python -m grader`` and ``grader batch`` run them, so demo
  cells cannot hang or slow grading and all three grade the same code.

Instructor-side only: nothing here ships in the learner kit.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.restore import add_notes_cell, keep_definitions, restore_locked_cells


def _released(preprocessor: NbGraderPreprocessor, resources: dict) -> Path:
    info = resources["nbgrader"]
    coursedir = CourseDirectory(config=preprocessor.config)
    folder = coursedir.format_path(coursedir.release_directory, ".", info["assignment"])
    return Path(folder) / f"{info['notebook']}.ipynb"


class RestoreLockedCells(NbGraderPreprocessor):
    """Put back deleted locked cells and reset edited ones, from the released notebook."""

    def preprocess(self, nb, resources):
        path = _released(self, resources)
        if not path.is_file():
            self.log.warning("no released notebook at %s: locked cells not checked", path)
            return nb, resources
        notes = restore_locked_cells(nb, nbformat.read(path, as_version=4))
        for note in notes:
            self.log.warning("%s: %s", resources["nbgrader"].get("student"), note)
        add_notes_cell(nb, notes)
        return nb, resources


class DefinitionsOnly(NbGraderPreprocessor):
    """Run only the definitions of the cells a learner may edit."""

    def preprocess(self, nb, resources):
        changed = keep_definitions(nb)
        if changed:
            self.log.info("kept only the definitions of %d learner cell(s)", changed)
        return nb, resources
