"""The narrow interface between the grader and a learner's notebook.

Like CS336's adapters, one place says which names the grader reads from a submission and what each must
be: each exercise's ``grader/exercises/exNN/contract.py``, gathered here. Notebooks can change freely
around these names without breaking the grader.

How a notebook is read: ``grader.loader`` runs only the *definitions* in its code cells (imports, ``def``,
``class`` and UPPER_CASE constants), never demo cells, in a sandboxed worker process
(``grader.worker``). The checks never touch the learner's objects: probes in that worker call the names
below on the judge's inputs and report what they observe.
"""

from __future__ import annotations

from pathlib import Path

from grader.exercises import Name, exercise_ids, part


def _contracts() -> dict[str, object]:
    return {ex: part(ex, "contract") for ex in exercise_ids()}


__all__ = [
    "INTERFACE",
    "NOTEBOOKS",
    "SHOWN_IN_LESSONS",
    "Name",
    "contract",
    "exercise_for",
    "loose_notebook",
    "not_an_exercise",
    "renamed_from",
]

INTERFACE: dict[str, dict[str, Name]] = {ex: {n.name: n for n in c.NAMES} for ex, c in _contracts().items()}
NOTEBOOKS: dict[str, str] = {ex: c.NOTEBOOK for ex, c in _contracts().items()}
SHOWN_IN_LESSONS: dict[str, dict[str, str]] = {ex: getattr(c, "SHOWN_IN_LESSONS", {}) for ex, c in _contracts().items()}


def contract(exercise: str, name: str | None) -> str:
    """What ``name`` must be, in words (for "not defined" messages)."""
    spec = INTERFACE.get(exercise, {}).get(name or "")
    return spec.contract if spec else f"a definition named {name!r}"


def exercise_for(path: Path) -> str | None:
    """The exercise a notebook belongs to, from its ``NN_`` file-name prefix."""
    prefix = path.name.split("_", 1)[0]
    candidate = f"ex{prefix}"
    return candidate if prefix.isdigit() and candidate in INTERFACE else None


def renamed_from(path: Path) -> str | None:
    """The released notebook name that ``path``'s name holds inside a longer one, as a learning platform's download
    writes it (``smithj_48213_02_graph_breaks.ipynb``), or None (none, or more than one)."""
    found = [n for n in NOTEBOOKS.values() if n.removesuffix(".ipynb") in path.name and n != path.name]
    return found[0] if len(found) == 1 else None


def not_an_exercise(path: Path) -> str:
    """Why a notebook in a class's submissions is not graded, with the rename that would make it one."""
    why = "not an exercise notebook: its name must start with the exercise's number (NN_topic.ipynb)"
    if (name := renamed_from(path)) is not None:
        why += f"; it looks like {name} renamed by a download: rename it to {name}"
    return why


def loose_notebook(path: Path, folder: Path) -> str:
    """Why a notebook lying directly in a class's ``folder`` is not graded, and where it belongs."""
    name = renamed_from(path) or "NN_topic.ipynb"
    return f"a notebook goes in a folder per student, {folder}/<student>/{name}"


def unknown_notebook(path: Path) -> str:
    """What to do about a notebook whose name names no exercise (:func:`exercise_for` gave None)."""
    return (
        f"cannot tell which exercise {path.name} is: a notebook's name must start with its exercise's number and an "
        f"underscore, like 02_my_copy.ipynb for exercise 2 (the released names: "
        f"{', '.join(NOTEBOOKS.values())})"
    )
