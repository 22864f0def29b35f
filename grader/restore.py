"""Repair a submitted notebook before grading: put back the locked cells a learner deleted or edited.

Both the nbgrader autograde hooks (``grader.nbgrader_hooks``) and batch grading (``grader.batch``) use it, so
the two grade the same code: every locked cell of the released notebook (the setup cell, given code, the check
cells) that a learner deleted is put back where it was, and one a learner edited is reset to the released
text. Each repair is reported, so the learner is graded and the instructor sees what happened. (Only the
notebook's definitions are ever run while grading, in a sandboxed worker: see ``grader.loader``.)
"""

from __future__ import annotations

import copy
import uuid

from grader.loader import nbgrader_metadata

NOTES_CELL_ID = "grader-notes"
NOTES_TITLE = "**Notes from the grader**"


def grade_id(cell) -> str | None:
    """The cell's nbgrader id, if it has one."""
    return nbgrader_metadata(cell).get("grade_id")


def is_locked(cell) -> bool:
    """nbgrader's rule: solution cells are editable, grade cells are locked, others as marked."""
    meta = nbgrader_metadata(cell)
    if not meta or meta.get("solution"):
        return False
    return bool(meta.get("grade") or meta.get("locked"))


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def restore_locked_cells(nb, released) -> list[str]:
    """Put ``released``'s locked cells back into ``nb`` (in place); return one note per repair."""
    notes: list[str] = []
    order = [grade_id(c) for c in released.cells]
    ids = {c.get("id") for c in nb.cells}
    for index, cell in enumerate(released.cells):
        gid = grade_id(cell)
        if not gid or not is_locked(cell):
            continue
        position = {grade_id(c): i for i, c in enumerate(nb.cells) if grade_id(c)}
        copies = [c for c in nb.cells if grade_id(c) == gid]  # an untouched copy must not hide an edited one
        if copies:
            edited = False
            for mine in copies:
                if mine.get("cell_type") != cell.get("cell_type") or _source(mine).strip() != _source(cell).strip():
                    edited = True
                    mine["cell_type"] = cell["cell_type"]
                    mine["source"] = _source(cell)
                    if cell["cell_type"] == "code":
                        mine.setdefault("outputs", [])
                        mine.setdefault("execution_count", None)
                    if not isinstance(mine.get("metadata"), dict):
                        mine["metadata"] = {}
                    mine["metadata"]["nbgrader"] = copy.deepcopy(nbgrader_metadata(cell))
            if edited:
                notes.append(f"locked cell `{gid}` was edited; it was graded as released")
            if len(copies) > 1:
                notes.append(
                    f"locked cell `{gid}` was copied {len(copies) - 1} time(s); every copy was graded as released"
                )
            continue
        restored = copy.deepcopy(cell)
        if restored.get("id") in ids:
            restored["id"] = uuid.uuid4().hex[:8]
        ids.add(restored.get("id"))
        before = [position[g] for g in order[:index] if g in position]
        after = [position[g] for g in order[index + 1 :] if g in position]
        at = max(before) + 1 if before else (min(after) if after else len(nb.cells))
        nb.cells.insert(at, restored)
        notes.append(f"locked cell `{gid}` was deleted; it was put back as released")
    return notes


def add_notes_cell(nb, notes: list[str]) -> None:
    """Put the repairs at the top of the notebook, where the learner's feedback shows them."""
    import nbformat

    # one notes cell, however often called, and never one a learner wrote to look like it
    nb.cells[:] = [c for c in nb.cells if not _looks_like_notes(c)]
    if not notes:
        return
    # one line each: a learner's exception text, quoted in a note, could otherwise start notes of its own
    text = NOTES_TITLE + "\n\n" + "\n".join(f"- {' '.join(n.split())}" for n in notes)
    cell = nbformat.v4.new_markdown_cell(text)
    cell["id"] = NOTES_CELL_ID
    nb.cells.insert(0, cell)


def _looks_like_notes(cell) -> bool:
    return cell.get("id") == NOTES_CELL_ID or (
        cell.get("cell_type") == "markdown" and _source(cell).lstrip().startswith(NOTES_TITLE)
    )


def read_notes(nb) -> list[str]:
    """The repairs recorded by ``add_notes_cell`` (empty if none): only from its cell, the grader's own id."""
    for cell in nb.cells:
        if cell.get("id") == NOTES_CELL_ID and cell.get("cell_type") == "markdown":
            return [line[2:] for line in _source(cell).splitlines() if line.startswith("- ")]
    return []
