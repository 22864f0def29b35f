"""Exercises are graded honestly: solutions pass everything, stubs fail, wrong work fails exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.context import Context
from grader.registry import checks_for
from tests.adversarial import RETURN, STEP
from tests.affected import can_change, code_cells
from tests.submissions import EXERCISES, MEASURED, ROOT, SOLUTION_01, SPLIT, first_to_fail, variant

pytestmark = pytest.mark.slow
# exercise 4's speed check times compiles (~25 s a run on CPU), exercise 6's captures (~15 s)
# A wrong submission is graded in one of three parts (ids end with it). In an exercise that sets SPLIT_GRADING, each
# first-listed one (tests.submissions.first_to_fail) is graded on the pinned torch only on the checks it must fail
# ("must fail"), and in `make test-compat` (torch 2.11, marker compat) on the other checks its edits can reach, which
# it must pass ("must pass"). Elsewhere a first-listed one is graded on both at once on the pinned torch ("exactly"),
# and one that fails only checks an earlier one already fails, "exactly" in `make test-compat`. So CI grades each
# check of each wrong submission once.
MUST_FAIL, MUST_PASS, EXACTLY = "must fail", "must pass", "exactly"


def _parts(exercise: str, name: str) -> tuple[tuple[str, bool], ...]:
    """How ``name`` is graded: ``(part, in make test-compat)`` for each part."""
    judged = EXERCISES[exercise][2][name][1] - MEASURED.get((exercise, name), set())
    kept = name in first_to_fail(exercise)
    if kept and judged and SPLIT[exercise]:
        return (MUST_FAIL, False), (MUST_PASS, True)
    return ((EXACTLY, not kept),)


WRONG = [
    pytest.param(ex, name, part, id=f"{ex}: {name} ({part})", marks=pytest.mark.compat if compat else ())
    for ex, (_, _, wrong) in EXERCISES.items()
    for name in wrong
    for part, compat in _parts(ex, name)
]


def _ids(exercise: str, kind: str | None = None) -> list[str]:
    return [c.id for c in checks_for(exercise) if kind is None or c.kind == kind]


@pytest.mark.parametrize("exercise", list(EXERCISES))
def test_solution_passes_every_correctness_and_structure_check(grade, exercise: str) -> None:
    """Speed checks are graded on the solution in the next test, which `make test` runs alone."""
    checks = [c for c in checks_for(exercise) if c.kind != "speed"]
    results = grade(EXERCISES[exercise][0], [c.id for c in checks])
    failed = {cid: r.message for cid, r in results.items() if not r.passed}
    assert not failed, f"the reference solution must pass every check: {failed}"
    assert sum(r.points for r in results.values()) == sum(c.points for c in checks)


@pytest.mark.timing
@pytest.mark.parametrize("exercise", [ex for ex in EXERCISES if _ids(ex, "speed")])  # ex00 has no speed check
def test_solution_passes_its_speed_checks_with_margin(grade, exercise: str) -> None:
    """One grading run of the speed checks (a fresh worker, a secret seed): every speed check passes, by half
    again the gain it demands. How often they pass across runs, graded as a busy class would be, is a
    benchmark rather than a test: `make speed-trials` (tools/speed_trials.py, results in bench/results/)."""
    ctx = Context.create()
    for cid, r in grade(EXERCISES[exercise][0], _ids(exercise, "speed"), seed=1).items():
        required = ctx.required_speedup(cid)
        assert r.passed, f"{cid}: {r.message}"
        assert r.measured >= 1 + 1.5 * (required - 1), (
            f"{cid}: {r.measured:.2f}x is too close to the threshold {required} on this machine"
        )


@pytest.mark.parametrize("exercise", list(EXERCISES))
def test_unmodified_exercise_fails_every_check_with_a_teaching_message(grade, exercise: str) -> None:
    results = grade(EXERCISES[exercise][1])
    for cid in _ids(exercise):
        r = results[cid]
        assert not r.passed, f"{cid} passed on the unmodified exercise"
        assert "not implemented yet" in r.message and "NotImplementedError" in r.message, r.message
        assert "grading process" not in r.message, f"{cid} crashed instead of failing cleanly: {r.message}"


@pytest.mark.parametrize("exercise, name, part", WRONG)
def test_wrong_submission_fails_exactly_the_right_checks(
    grade, tmp_path: Path, exercise: str, name: str, part: str
) -> None:
    """Every correctness and structure check the edits can reach (``tests/affected.py``) fails or passes exactly
    as expected: in ``part`` "must fail" the checks it must fail, in "must pass" the others, in "exactly" both. A
    speed check runs only where it must fail by a wrong result caught while timing; elsewhere its outcome is a
    measurement, and one that must fall short runs in the next test, alone."""
    solution, _, wrong = EXERCISES[exercise]
    edits, expected = wrong[name]
    expected = expected - MEASURED.get((exercise, name), set())
    notebook = variant(solution, tmp_path / solution.name, edits)
    before, after = code_cells(solution), code_cells(notebook)
    # a check the edits cannot reach grades as on the reference solution, which the first test grades
    reached = [
        c.id
        for c in checks_for(exercise)
        if c.id in expected or (c.kind != "speed" and can_change(c.needs, before, after))
    ]
    ids = [cid for cid in reached if part == EXACTLY or (cid in expected) == (part == MUST_FAIL)]
    if not ids:
        pytest.skip(f"{name}: its edits reach no check it {part}")
    results = grade(notebook, ids)
    failed = {cid for cid, r in results.items() if not r.passed}
    judged = {cid for cid, r in results.items() if r.kind != "speed" or cid in expected}
    assert failed & judged == expected & set(ids), (
        f"{name}: expected to fail {sorted(expected & set(ids))} of {sorted(ids)}, failed {sorted(failed)}; "
        + "; ".join(f"{c}: {results[c].message[:200]}" for c in sorted((failed & judged) ^ (expected & set(ids))))
    )
    for cid in expected & set(ids):
        assert "grading process" not in results[cid].message


@pytest.mark.timing
@pytest.mark.parametrize("exercise, name", list(MEASURED), ids=[f"{ex}: {name}" for ex, name in MEASURED])
def test_wrong_submission_falls_short_of_the_speed_it_must_not_reach(
    grade, tmp_path: Path, exercise: str, name: str
) -> None:
    """A wrong submission whose values are right but whose speed is not: graded with nothing else running, its
    speed checks measure a gain below what they require."""
    solution, _, wrong = EXERCISES[exercise]
    ctx = Context.create()
    for cid, r in grade(
        variant(solution, tmp_path / solution.name, wrong[name][0]), sorted(MEASURED[exercise, name])
    ).items():
        assert not r.passed and r.measured is not None, f"{cid}: {r.message}"
        assert r.measured < ctx.required_speedup(cid), f"{cid}: {r.message}"


def test_a_probe_that_reads_a_name_its_check_does_not_need_fails_the_check(grade, profile, monkeypatch) -> None:
    """``needs`` is enforced, here and in the worker: the wrong-submission test's pruning (tests/affected.py)
    relies on it. A check that needs only SmoothedCE asks for builtin_smoothed_ce."""
    from grader import registry
    from grader.loader import load_notebook
    from grader.local_learner import LocalLearner
    from grader.results import run_check

    monkeypatch.setattr(registry, "CHECKS", dict(registry.CHECKS))

    @registry.check("ex01.test_only.undeclared_read", kind="correctness", points=1, needs=("SmoothedCE",))
    def undeclared_read(learner, ctx) -> None:
        args = {"factory": "builtin_smoothed_ce", "weights": [1.0] * 4, "smoothing": 0.1, "ignore_index": -100}
        learner.ask("ex01.loss", args, {})

    local = LocalLearner(load_notebook(SOLUTION_01).namespace, "ex01", profile)
    remote = grade(SOLUTION_01, ["ex01.test_only.undeclared_read"])["ex01.test_only.undeclared_read"]
    for result in (run_check(registry.get("ex01.test_only.undeclared_read"), local, Context.create()), remote):
        assert not result.passed and "does not list in its needs" in result.message, result.message
    assert local.needs is None, "a check's needs outlived it"


def test_a_crash_and_a_hang_cost_only_their_own_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os._exit inside one function and an endless loop in another: the rest still grade. The hang's message names
    its line; the next check that reaches the same loop stops once every look since SAME_PLACE_AFTER_S found it
    there, long before its own limit, and so does one where torch.compile is stuck tracing that loop."""
    from coursekit.profile import get_profile
    from grader import learner
    from grader.runner import grade_notebook

    monkeypatch.setattr(learner, "SAME_PLACE_AFTER_S", 2.0)
    monkeypatch.setattr(learner, "SAME_PLACE_EVERY_S", 1.0)
    exits = "    import os\n    os._exit(3)\n    total = torch.zeros((), device=images.device)"
    loop = "        while eps >= 0:  # an endless loop\n            eps = eps + 0\n"
    notebook = variant(SOLUTION_01, tmp_path / SOLUTION_01.name, {STEP: exits, RETURN: loop + RETURN})
    ids = [
        "ex01.smoothed_ce.values",
        "ex01.builtin.values",
        "ex01.smoothed_ce.gradients",
        "ex01.compiled.values",
        "ex01.train_step.update",
        "ex01.train_step.no_sync",
    ]
    grade_ = grade_notebook(notebook, "ex01", get_profile(), 7, progress=False, check_timeout_s=20, check_ids=ids)
    hang, builtin, later, traced, update, no_sync = grade_.results
    assert "no answer from this check after 20 s" in hang.message, hang
    assert "It was in `forward`, the " in hang.message and "`while eps >= 0:" in hang.message, "it names its line"
    assert builtin.passed, builtin
    assert later.message.startswith("stopped after") and "where ex01.smoothed_ce.values ran out" in later.message
    assert "`while eps >= 0:" in later.message and later.seconds < 15, later
    assert traced.message.startswith("stopped after") and "torch.compile was tracing `forward`" in traced.message
    assert "where ex01.smoothed_ce.values ran out" in traced.message and traced.seconds < 15, traced
    assert "exited with code 3" in update.message and "exited with code 3" in no_sync.message, (update, no_sync)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader", *args, "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_cli_grades_a_folder_writes_reports_and_exits_zero(tmp_path: Path) -> None:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / SOLUTION_01.name).write_bytes(SOLUTION_01.read_bytes())
    report = tmp_path / "out" / "grade.json"
    proc = _cli(str(folder), "--report", str(report), "--only", "ex01.smoothed_ce.values,ex01.smoothed_ce.speed")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert {"device", "torch", "profile", "score", "max_score", "checks"} <= set(data)
    assert data["score"] == data["max_score"] == 4
    for c in data["checks"]:
        assert {"id", "kind", "points", "max_points", "passed", "measured", "required", "message"} <= set(c)
    assert "ex01.smoothed_ce.speed" in proc.stdout and "pass" in proc.stdout
    assert report.with_suffix(".md").is_file() and report.with_suffix(".speedups.png").is_file()


def test_cli_scores_bad_input_zero_with_a_clear_message(tmp_path: Path) -> None:
    broken = tmp_path / "01_cross_entropy_ladder.ipynb"
    broken.write_text('{"cells": [')
    report = tmp_path / "bad.json"
    proc = _cli(str(broken), "--report", str(report), "--only", "ex01.smoothed_ce.values,ex01.builtin.values")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["score"] == 0 and len(data["checks"]) == 2
    assert all("not valid notebook JSON" in c["message"] for c in data["checks"])
    missing = _cli(str(tmp_path / "empty"), "--report", str(report))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_pytest_front_end_grades_only_the_selected_checks(monkeypatch, tmp_path: Path) -> None:
    """``pytest grader -k ...`` grades a notebook on the checks the session kept, not on all of its exercise's."""
    from types import SimpleNamespace

    from grader import test_submission

    notebook, other = tmp_path / "01_x.ipynb", tmp_path / "02_x.ipynb"
    notebook.write_text("{}")
    item = lambda nb, cid: SimpleNamespace(callspec=SimpleNamespace(params={"notebook": nb, "check_id": cid}))  # noqa: E731
    session = SimpleNamespace(items=[item(notebook, "ex01.a"), item(other, "ex02.b"), item(notebook, "ex01.c")])
    asked = []

    def fake_grade(path, exercise, profile, seed, check_ids=None, progress=True):
        asked.append(check_ids)
        result = SimpleNamespace(id="", passed=True, message="ok")
        return SimpleNamespace(results=[SimpleNamespace(**{**vars(result), "id": cid}) for cid in check_ids])

    monkeypatch.setattr(test_submission, "grade_notebook", fake_grade)
    graded: dict = {}
    for cid in ("ex01.a", "ex01.c"):
        test_submission.test_check("ex01", notebook, cid, graded, SimpleNamespace(session=session))
    assert asked == [["ex01.a", "ex01.c"]]  # graded once, on the two selected checks of this notebook only


def test_pytest_front_end_runs_the_same_checks() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "grader",
            "-q",
            "-p",
            "no:cacheprovider",
            "--submission",
            str(SOLUTION_01),
            "-k",
            "values",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "3 passed" in proc.stdout


def test_the_gpu_running_out_of_memory_in_the_judge_says_who_held_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA a worker that keeps the GPU's memory makes the judge's own reference run out of it: the message
    names what the judge did not hold, not a grader fault (faked here: no GPU on CI)."""
    import torch

    from grader import registry
    from grader.results import run_check

    monkeypatch.setattr(registry, "CHECKS", dict(registry.CHECKS))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (1 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 3 << 30)

    @registry.check("ex01.test_only.reference_oom", kind="correctness", points=1, needs=("SmoothedCE",))
    def reference_oom(learner, ctx) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    @registry.check("ex01.test_only.judge_bug", kind="correctness", points=1, needs=("SmoothedCE",))
    def judge_bug(learner, ctx) -> None:
        raise KeyError("reference")

    learner = type("Learner", (), {"needs": None})()
    oom = run_check(registry.get("ex01.test_only.reference_oom"), learner, None)
    assert not oom.passed and oom.replace_worker
    assert "76.0 GiB of its 80.0 GiB held outside the grader's tensors: by your code's worker" in oom.message
    bug = run_check(registry.get("ex01.test_only.judge_bug"), learner, None)
    assert "the grader could not run this check (KeyError" in bug.message, bug.message


UNGUARDED = """from pathlib import Path
from coursekit.profile import get_profile
from grader.runner import grade_notebook

grade = grade_notebook(Path({notebook!r}), "ex00", get_profile("smoke", "cpu"), 1, check_ids=["ex00.capture.graph"],
                       progress=False)
print("RESULT", grade.results[0].passed, grade.results[0].message)
"""


def test_a_script_without_a_main_guard_can_call_the_grader(tmp_path: Path) -> None:
    """Session 34: ``multiprocessing`` imports the starting script in each worker, and a script without an
    ``if __name__ == "__main__":`` guard graded again in there: its worker never answered, and every check failed
    on "loading the notebook" (or blamed the learner for an exit). The worker no longer imports the judge's script."""
    script = tmp_path / "grade_it.py"
    script.write_text(UNGUARDED.format(notebook=str(EXERCISES["ex00"][0])))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "RESULT True ok" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
