"""Who a submission belongs to, and which submissions autograde could not hand to nbgrader."""

from __future__ import annotations

import json
from pathlib import Path

PATTERN_CHARACTERS = frozenset("*?[]")


def id_problem(student: str) -> str | None:
    """Why ``student`` (a folder's name) cannot be a learner id for nbgrader, or None. nbgrader reads an id as a file
    pattern: a learner named ``*`` selected every classmate's folder, and a classmate whose grading then failed half
    way was skipped as graded ever after (red team, session 32)."""
    found = sorted(PATTERN_CHARACTERS & set(student))
    if found:
        return (
            f"the learner id {student!r} holds {' '.join(found)}, which nbgrader reads as a file pattern matching "
            "classmates' folders: rename the folder"
        )
    return None


def autograded_notebook(course: Path, student: str, assignment: str) -> bool:
    """Whether nbgrader wrote ``student``'s graded notebook for ``assignment`` (its folder alone is left behind by a
    grading that failed half way, and nbgrader then skips the submission as graded)."""
    return any((course / "autograded" / student / assignment).glob("*.ipynb"))


REFUSED_FILE = ".tcip-not-autograded.json"


def refused_submissions(course: Path) -> dict[str, dict[str, str]]:
    """``{assignment: {student: why}}``: the latest submissions autograde could not hand to nbgrader (written by
    ``autograde``), which ``export`` lists and ``feedback`` explains to their learners."""
    try:
        data = json.loads((course / REFUSED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {a: {s: str(w) for s, w in v.items()} for a, v in data.items() if isinstance(v, dict)}


def refused_note(course: Path, assignment: str, student: str, why: str) -> str:
    """What a refused submission means for its learner's grade: zero, or an earlier submission's grade kept."""
    if autograded_notebook(course, assignment=assignment, student=student):
        return f"the latest submission was not graded ({why}); the grade of an earlier submission stands"
    return f"the submission was not graded ({why}); it scores zero until a notebook is handed in"
