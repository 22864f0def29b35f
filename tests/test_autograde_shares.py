"""``make autograde JOBS=n`` deals the class to n nbgrader processes, each grading its share in one process."""

from __future__ import annotations

import pytest

pytest.importorskip("nbgrader", reason="tools.classroom is instructor tooling: nbgrader is not in the compat venv")

from tools.classroom import share_options, shares  # noqa: E402


def test_students_are_dealt_round_robin_and_each_share_is_selected_exactly() -> None:
    students = ["aaron", "alice", "bob", "carol", "dave"]
    dealt = shares(students, 2)
    assert dealt == [["aaron", "bob", "dave"], ["alice", "carol"]]
    assert share_options(dealt[0], students) == ["--CourseDirectory.student_id_exclude=alice,carol"]
    assert share_options(["bob"], students) == ["--student=bob"]
    assert share_options(students, students) == []  # one share: the whole class
    assert shares(students[:1], 4) == [["aaron"]]  # no empty share starts a process


def test_a_student_id_with_a_comma_gets_a_process_of_its_own() -> None:
    # nbgrader splits student_id_exclude at commas: such an id could not be excluded from the other shares
    assert shares(["a,b", "c", "d"], 2) == [["a,b"], ["c"], ["d"]]
    assert share_options(["a,b"], ["a,b", "c"]) == ["--student=a,b"]
