"""Numbers learner code returns, which the judge prints and sizes tensors from (red team, session 33): an int too
large for a float ended ``python -m grader`` with no report and cost a learner their graded notebook in nbgrader, and
exercise 4's bucket length made the judge build a batch three million tokens long."""

from __future__ import annotations

import pytest

from coursekit.lessons.dynamic_shapes.givens import MAX_LEN
from grader.exercises.ex04.public import buckets
from grader.numbers import format_value
from grader.probing import Failure, learner_int
from grader.protocol import MAX_LEARNER_INT, Answer, ProtocolError, pack, unpack


def test_a_learners_int_is_checked_where_it_is_returned() -> None:
    assert learner_int(7, "count_compiles") == 7 and learner_int(-MAX_LEARNER_INT, "x") == -MAX_LEARNER_INT
    for value, says in ((10**400, "about 401 digits"), (10**5000, "about 5001 digits"), (True, "not an int")):
        with pytest.raises(Failure, match=says):
            learner_int(value, "count_compiles", "Count graphs.")
    with pytest.raises(Failure, match="returned 2.5, not an int. Count graphs."):
        learner_int(2.5, "count_compiles", "Count graphs.")


def test_a_reply_holding_a_huge_int_is_a_protocol_error_and_a_large_count_is_not() -> None:
    header, _ = unpack(pack({"counts": [10**18 - 1, -(10**18 - 1)]}))
    assert header["counts"] == [10**18 - 1, -(10**18 - 1)]
    for huge in (10**18, -(10**400)):
        with pytest.raises(ProtocolError, match="an integer of 19 digits|an integer of 401 digits"):
            unpack(pack({"counts": [huge]}))


def test_an_int_too_large_for_a_float_prints_by_its_order_of_magnitude() -> None:
    assert format_value(10**400, "correctness") == "about 1e400"
    assert format_value(-(10**400), "structure") == "-about 1e400"
    assert format_value(3, "structure") == "3" and format_value(2.5, "correctness") == "2.5"


class _Learner:
    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def ask(self, probe: str, *args: object, **kwargs: object) -> Answer:
        return Answer(probe, {"lengths": self.lengths})


def test_a_bucket_longer_than_twice_the_longest_sequence_is_refused_before_the_judge_builds_it() -> None:
    powers = [16 if n <= 16 else 32 if n <= 32 else 64 if n <= 64 else 128 for n in range(1, MAX_LEN + 1)]
    assert buckets(_Learner(powers)) == powers
    assert buckets(_Learner([2 * MAX_LEN] * MAX_LEN)) == [2 * MAX_LEN] * MAX_LEN
    with pytest.raises(AssertionError, match=f"pad to at most 2 \\* MAX_LEN = {2 * MAX_LEN} tokens"):
        buckets(_Learner(powers[:-1] + [3_000_000]))
