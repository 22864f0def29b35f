"""A class of learners for the classroom tests and the batch-throughput bench.

Submissions start from the *released* exercise notebook (what learners get), with the
solution cells filled in from ``solutions/`` and then edited the way learners go wrong.
Each learner comes with the points every check must score.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from grader.context import Context
from grader.exercises.ex02.hidden import hidden_cases
from tests.submissions import ROOT

SECRET_SEED = "tcip-class-20261121"  # fixed, so autograde and batch grading use the same hidden inputs
HANG_ON = 33  # aaron's calibrate never returns for 33 values (the opcheck check's input)

EX02 = "02_graph_breaks.ipynb"
EX02_POINTS = {
    "ex02.calibrate.opcheck": 2,
    "ex02.scorer.outputs": 2,
    "ex02.scorer.gradients": 2,
    "ex02.scorer.statistic": 1,
    "ex02.scorer.no_breaks": 2,
    "ex02.scorer.compiles_once": 2,
    "ex02.scorer.no_sync": 1,
    "ex02.scorer.speed": 2,
}
MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def filled(name: str, edits: dict[str, str] | None = None):
    """The released notebook ``name`` with its solution cells written as in ``solutions/``, then ``edits``."""
    released = nbformat.read(ROOT / "exercises" / name, as_version=4)
    solution = {
        _grade_id(c): c.source
        for c in nbformat.read(ROOT / "solutions" / name, as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    for cell in released.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "\n".join(line for line in solution[_grade_id(cell)].splitlines() if not MARKER.match(line))
    for old, new in (edits or {}).items():
        hits = [c for c in released.cells if c.cell_type == "code" and old in c.source]
        if len(hits) != 1:
            raise ValueError(f"edit {old!r} matches {len(hits)} cells")
        hits[0].source = hits[0].source.replace(old, new)
    return released


def _delete(nb, *grade_ids: str) -> None:
    nb.cells = [c for c in nb.cells if _grade_id(c) not in grade_ids]


def _edit(nb, grade_id: str, source: str) -> None:
    next(c for c in nb.cells if _grade_id(c) == grade_id).source = source


MALLORY = '''
import builtins
import os
import shutil


def run_check(check_id, namespace):
    """An answer cell's own run_check: 'passes' every check without running it."""
    print(f"[PASS] {check_id}")


def print(*args, **kwargs):
    builtins.print("[PASS]", *args, **kwargs)


class AssertionError(Exception):
    pass


def _vandalise():
    """Delete every classmate's submission and report, and the gradebook, wherever they are."""
    done = []
    for path in TARGETS:
        for victim in ([path] if not os.path.isdir(path) else [os.path.join(path, n) for n in os.listdir(path)]):
            if "mallory" in victim:
                continue
            try:
                shutil.rmtree(victim) if os.path.isdir(victim) else os.remove(victim)
                done.append(victim)
            except OSError:
                pass
    return done


VANDALISED = _vandalise()
'''


XSS = 'My notes. <img src="x" onerror="alert(\'tcip-xss\')"> <script>alert("tcip-xss")</script>'


def class_of_ex02(course: Path | None = None) -> dict[str, tuple[object, dict[str, int], list[str]]]:
    """learner -> (notebook, points per check, phrases the grader's repair notes must contain). With ``course``,
    the class has a sixth learner, mallory, whose notebook solves nothing, redefines ``run_check``, ``print`` and
    ``AssertionError`` in an answer cell, and tries to delete every classmate's submission, the reports and the
    gradebook under ``course`` and ``course``'s parent when it loads."""
    full = dict(EX02_POINTS)
    correct = filled(EX02)
    partial = filled(EX02, {"        h = h - (h * real).sum(0) / real.sum()": "        h = h - h.mean(0)"})
    broken = nbformat.read(ROOT / "exercises" / EX02, as_version=4)
    deleted = filled(EX02)
    _delete(deleted, "setup", "ex02-scorer-outputs")  # the imports (and run_check) and a public check cell
    _edit(deleted, "show-broken", "print('I read it')")
    _edit(deleted, "ex02-scorer-no_breaks", "print('[PASS] ex02.scorer.no_breaks, trust me')")
    deleted.cells.append(
        nbformat.v4.new_code_cell("while True:  # a demo left running: never run while grading\n    pass")
    )
    hangs = filled(
        EX02,
        {
            "    values = np.interp(": f"    while top.numel() == {HANG_ON}:  # an endless loop\n"
            "        pass\n    values = np.interp("
        },
    )
    secret_rows = {case.rows for case in hidden_cases(Context.create(secret=SECRET_SEED))}
    assert HANG_ON not in secret_rows, "the secret case must not hit aaron's hang"
    learners = {  # aaron, whose notebook hangs, is graded first: his time-out overlaps the others' grading
        "aaron": (hangs, {**full, "ex02.calibrate.opcheck": 0}, []),
        "alice": (correct, full, []),
        "bob": (partial, {**full, "ex02.scorer.outputs": 0, "ex02.scorer.gradients": 0, "ex02.scorer.speed": 0}, []),
        "carol": (broken, dict.fromkeys(full, 0), []),
        "dave": (
            deleted,
            full,
            [
                "`setup` was deleted",
                "`ex02-scorer-outputs` was deleted",
                "`show-broken` was edited",
                "`ex02-scorer-no_breaks` was edited",
            ],
        ),
    }
    if course is not None:
        mallory = nbformat.read(ROOT / "exercises" / EX02, as_version=4)
        targets = [
            str(course / "submitted"),
            str(course / "autograded"),
            str(course / "gradebook.db"),
            str(course.parent / "batch"),
            str(course.parent / "submissions"),
        ]
        answer = next(c for c in mallory.cells if c.metadata.get("nbgrader", {}).get("solution"))
        answer.source = f"TARGETS = {targets!r}\n" + MALLORY + "\n" + answer.source
        mallory.cells.append(nbformat.v4.new_markdown_cell(XSS))  # for whoever opens her feedback page
        learners["mallory"] = (mallory, dict.fromkeys(full, 0), [])
    return learners


def write_class(folder: Path, learners: dict) -> Path:
    """``folder/<learner>/02_graph_breaks.ipynb`` for each learner; returns ``folder``."""
    for learner, (nb, _, _) in learners.items():
        (folder / learner).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / learner / EX02)
    return folder
