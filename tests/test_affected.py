"""The wrong-submission tests grade only the checks an edit can reach: that choice is conservative."""

from __future__ import annotations

from tests.affected import EVERYTHING, can_change, edited, reach
from tests.submissions import EXERCISES, variant

CELLS = [
    "import torch\nSCALE = 2\n",
    "def helper(x):\n    return x * SCALE\n\ndef loss(x):\n    return helper(x).sum()\n",
    "def step(x):\n    return x + 1\n\nprint('a demo the loader skips')\n",
]


def _edit(old: str, new: str) -> list[str]:
    return [c.replace(old, new) for c in CELLS]


def test_an_edit_reaches_the_checks_whose_needs_use_it() -> None:
    after = _edit("return x * SCALE", "return x * SCALE * 3")
    assert edited(CELLS, after) == {"helper"}
    assert reach(("loss",), CELLS) >= {"loss", "helper", "SCALE"}
    assert can_change(("loss",), CELLS, after) and not can_change(("step",), CELLS, after)


def test_a_demo_edit_reaches_nothing_and_a_side_effect_reaches_everything() -> None:
    assert edited(CELLS, _edit("print('a demo", "print('another demo")) == set()
    assert not can_change(("loss", "step"), CELLS, _edit("print('a demo", "print('another demo"))
    for old, new in (("SCALE = 2", "SCALE = 3"), ("import torch", "import torch as th")):
        assert EVERYTHING in edited(CELLS, _edit(old, new)) and can_change(("step",), CELLS, _edit(old, new))
    decorated = [*CELLS, "@loss.register\ndef _(x):\n    return x\n"]
    assert can_change(("step",), decorated, [*CELLS, "@loss.register\ndef _(x):\n    return -x\n"])


def test_every_wrong_submission_changes_what_it_claims_to_break(tmp_path) -> None:
    """Each expected failure is reachable from its edits: an edit that reached none would be graded on nothing."""
    from grader.registry import get
    from tests.affected import code_cells

    for exercise, (solution, _, wrong) in EXERCISES.items():
        before = code_cells(solution)
        for name, (edits, expected) in wrong.items():
            after = code_cells(variant(solution, tmp_path / exercise / solution.name, edits))
            unreached = [cid for cid in expected if not can_change(get(cid).needs, before, after)]
            assert not unreached, f"{exercise} '{name}': its edits reach none of the needs of {unreached}"


def test_make_test_grades_a_wrong_submission_for_every_check_one_must_fail(monkeypatch) -> None:
    """`make test` grades the first-listed wrong submission for each check (tests.submissions.first_to_fail): whole,
    or where the exercise sets SPLIT_GRADING on the checks it must fail, `make test-compat` grading the other checks
    it can reach; `make test-compat` grades every other submission whole. So CI grades each check of each wrong
    submission once, and both exercises that split and exercises that do not exist."""
    from tests import submissions
    from tests.test_grader import EXACTLY, MUST_FAIL, MUST_PASS, WRONG

    parts: dict[tuple[str, str], dict[str, bool]] = {}
    for p in WRONG:
        exercise, name, part = p.values
        parts.setdefault((exercise, name), {})[part] = any(m.name == "compat" for m in p.marks)
    for exercise, (_, _, wrong) in EXERCISES.items():
        kept = submissions.first_to_fail(exercise)
        for name, (_, expected) in wrong.items():
            judged = set(expected) - submissions.MEASURED.get((exercise, name), set())
            split = name in kept and bool(judged) and submissions.SPLIT[exercise]
            want = {MUST_FAIL: False, MUST_PASS: True} if split else {EXACTLY: name not in kept}
            assert parts[exercise, name] == want, (exercise, name, parts[exercise, name])
    assert any(submissions.SPLIT.values()) and not all(submissions.SPLIT.values())
    for exercise, (_, _, wrong) in EXERCISES.items():
        kept = submissions.first_to_fail(exercise)
        failing = [set(e) - submissions.MEASURED.get((exercise, n), set()) for n, (_, e) in wrong.items()]
        assert set().union(*failing) == set().union(*(failing[list(wrong).index(n)] for n in kept)), exercise
    toy = {"a": (None, {"x"}), "b": (None, {"x"}), "c": (None, {"x", "y"}), "d": (None, {"s"}), "e": (None, set())}
    monkeypatch.setitem(submissions.EXERCISES, "toy", (None, None, toy))
    monkeypatch.setitem(submissions.MEASURED, ("toy", "d"), {"s"})
    assert submissions.first_to_fail("toy") == ["a", "c", "d", "e"]  # b fails only x, which a already fails
