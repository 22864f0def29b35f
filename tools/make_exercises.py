"""Generate ``exercises/`` from ``solutions/`` with nbgrader, or check that they agree.

    python -m tools.make_exercises          # regenerate exercises/
    python -m tools.make_exercises --check  # exit 1 if exercises/ drifted from solutions/

nbgrader's ``generate_assignment`` strips the ``### BEGIN SOLUTION`` regions
(leaving ``raise NotImplementedError()``) and the ``### BEGIN HIDDEN TESTS``
regions, clears outputs and locks the given cells.  A header cell says the
file is generated and where to edit.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path
from unittest import mock

import nbformat
from nbgrader.apps import NbGraderAPI
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
HEADER = """\
> **Generated file — do not edit here.** This exercise is generated from `solutions/{name}` by
> `make exercises` (nbgrader `generate_assignment`). Work in this copy as a learner; to change the
> exercise itself, edit `solutions/{name}` and run `make exercises`.
"""

# what the learner kit's copy says instead (`make release`): the kit has no solutions/ and no `make exercises`
KIT_HEADER = """\
> **Your copy of this exercise.** Replace every `raise NotImplementedError()`, run the public check cells as
> you go, and `make check EX={number}` for a quick table. Your instructor grades it, hidden checks included.
"""


def _header(path: Path, name: str, text: str = HEADER) -> None:
    cell = nbformat.v4.new_markdown_cell(text.format(name=name, number=name[:2]))
    cell.id = "generated-header"  # fixed, so regenerating is byte-for-byte repeatable
    nb = nbformat.v4.new_notebook(cells=[cell])
    nbformat.write(nb, path)


def generate_assignment(course: Path, solution: Path, db_url: str | None = None, header: str = HEADER) -> Path:
    """Run nbgrader's ``generate_assignment`` for one solution notebook in the course folder ``course``.

    The assignment is ``exNN`` (from the ``NN_`` prefix); nbgrader records it in the gradebook
    (``db_url``, default ``course/gradebook.db``) and writes ``course/release/exNN/<name>``, which is returned.
    ``header`` opens the notebook: the repository's generated-file note, or the learner kit's ``KIT_HEADER``.
    """
    assignment = f"ex{solution.name[:2]}"
    (course / "source" / assignment).mkdir(parents=True, exist_ok=True)
    shutil.copy(solution, course / "source" / assignment / solution.name)
    header_notebook = course / f"header-{assignment}.ipynb"
    _header(header_notebook, solution.name, header)
    db_url = db_url or f"sqlite:///{course / 'gradebook.db'}"
    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = db_url
    config.IncludeHeaderFooter.header = str(header_notebook)
    # in this process: a `python -m nbgrader` per notebook spent 3-4 s of its 4 starting up (26 s for seven)
    # nbgrader's gradebook runs the `alembic` command, which lives beside this interpreter
    with mock.patch.dict(os.environ, PATH=nbgrader_env()["PATH"]), contextlib.chdir(course):
        result = NbGraderAPI(config=config).generate_assignment(assignment, force=True, create=True)
    if not result["success"]:
        raise SystemExit(f"nbgrader generate_assignment failed for {solution.name}:\n{result.get('log', '')}")
    return course / "release" / assignment / solution.name


def nbgrader_env() -> dict[str, str]:
    """The environment for an nbgrader subprocess: it runs the `alembic` command, which lives beside this
    interpreter, and jupyter's helper commands."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def generate(out_dir: Path) -> list[Path]:
    """Write one exercise notebook per solution notebook into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="nbgrader-") as tmp:
        course = Path(tmp)
        for solution in sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb")):
            target = out_dir / solution.name
            shutil.copy(generate_assignment(course, solution), target)
            written.append(target)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    if not args.check:
        for path in generate(EXERCISES):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [
            p.name
            for p in fresh
            if not (EXERCISES / p.name).is_file() or not filecmp.cmp(p, EXERCISES / p.name, shallow=False)
        ]
        extra = sorted({p.name for p in EXERCISES.glob("*.ipynb")} - {p.name for p in fresh})
    if stale or extra:
        print(
            f"exercises/ is out of date with solutions/ (stale: {stale}, without a solution: {extra}); "
            "run `make exercises` and commit the result",
            file=sys.stderr,
        )
        return 1
    print("exercises/ matches solutions/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
