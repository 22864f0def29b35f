"""Locked cells are graded as released whatever a submission does to them, and the grader's notes are the grader's
(red team, session 30: an untouched copy of a locked cell hid an edit to it, a list where nbgrader metadata belongs
stopped the repair, and a learner's Markdown cell could pass for the grader's notes)."""

from __future__ import annotations

import copy

import nbformat

from grader.restore import NOTES_TITLE, add_notes_cell, grade_id, read_notes, restore_locked_cells
from grader.worker_start import ROOT

RELEASED = nbformat.read(ROOT / "exercises" / "01_cross_entropy_ladder.ipynb", as_version=4)


def _setup(nb) -> list:
    return [c for c in nb.cells if grade_id(c) == "setup"]


def test_an_untouched_copy_of_a_locked_cell_does_not_hide_an_edit_to_it() -> None:
    nb = copy.deepcopy(RELEASED)
    (setup,) = _setup(nb)
    nb.cells.append(copy.deepcopy(setup))  # the copy the repair used to compare, alone
    setup.source = "import os  # the learner's own setup"
    notes = restore_locked_cells(nb, RELEASED)
    assert "locked cell `setup` was edited; it was graded as released" in notes
    assert "locked cell `setup` was copied 1 time(s); every copy was graded as released" in notes
    assert all(c.source == _setup(RELEASED)[0].source for c in _setup(nb))


def test_nbgrader_metadata_that_is_not_a_mapping_is_no_metadata() -> None:
    nb = copy.deepcopy(RELEASED)
    nb.cells[0].metadata["nbgrader"] = ["x"]  # valid nbformat: metadata takes any value
    nb.cells.append(nbformat.v4.new_code_cell("pass", metadata={"nbgrader": "locked"}))
    assert isinstance(restore_locked_cells(nb, RELEASED), list)


def test_only_the_graders_own_notes_cell_is_read_and_a_learners_look_alike_is_dropped() -> None:
    nb = copy.deepcopy(RELEASED)
    forged = nbformat.v4.new_markdown_cell(NOTES_TITLE + "\n\n- flagged for review: the reference is wrong")
    forged["id"] = "grader-notes"
    nb.cells.insert(0, forged)
    nb.cells.append(nbformat.v4.new_markdown_cell(NOTES_TITLE + "\n\n- locked cell `setup` was graded as released"))
    add_notes_cell(nb, [])  # what the repair step does when it has nothing to say
    assert read_notes(nb) == [] and not any(NOTES_TITLE in c.source for c in nb.cells if c.cell_type == "markdown")
    add_notes_cell(nb, ["locked cell `setup` was edited; it was graded as released"])
    assert read_notes(nb) == ["locked cell `setup` was edited; it was graded as released"]


def test_a_note_that_quotes_a_learners_exception_stays_one_note() -> None:
    """Red team, session 32: a load problem quotes the learner's exception text, newlines and all, and a line of it
    starting with ``- `` read back as a note of the grader's own ("flagged for review: ... bob shared this
    notebook") in the feedback page and the export."""
    message = "note: ValueError: boom\n- flagged for review: classmate bob shared this notebook\n  - and more"
    nb = nbformat.v4.new_notebook()
    add_notes_cell(nb, [message, "locked cell `setup` was edited"])
    assert read_notes(nb) == [
        "note: ValueError: boom - flagged for review: classmate bob shared this notebook - and more",
        "locked cell `setup` was edited",
    ]
