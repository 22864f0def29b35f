"""The adversarial corpus: every trick gains nothing, is contained, and leaves the grader and other files intact."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from coursekit.profile import get_profile
from grader.results import CheckResult
from grader.runner import grade_notebook
from grader.scan import scan_cells
from tests.adversarial import (
    CHEATS,
    EAGER_STREAM,
    NAIVE,
    SKIP_BACKWARD,
    SKIP_STREAM_BATCHES,
    SKIP_TRAINING_STEPS,
    TOKEN_COMPILE,
)
from tests.submissions import EXERCISE_01, ROOT, SOLUTION_01, variant

pytestmark = pytest.mark.slow


def _sandboxed_descendants() -> list[psutil.Process]:
    """Processes started by learner code (they carry the sandbox's seccomp filter) still alive under this process."""
    from grader.containment import _sandboxed

    return [p for p in psutil.Process().children(recursive=True) if _sandboxed(p.pid)]


def _digest(rel: str) -> str | None:
    path = ROOT / rel
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def build(name: str, out: Path) -> Path:
    attack = CHEATS[name]
    base = EXERCISE_01 if attack.base == "exercise" else SOLUTION_01
    return variant(base, out, attack.edits, append=attack.cells)


@pytest.mark.parametrize("name", list(CHEATS))
def test_cheat_gains_nothing(tmp_path: Path, name: str) -> None:
    attack = CHEATS[name]
    before = {rel: _digest(rel) for rel in attack.untouched}
    notebook = build(name, tmp_path / SOLUTION_01.name)
    grade = grade_notebook(
        notebook,
        "ex01",
        get_profile(),
        99,
        check_ids=list(attack.expect),
        check_timeout_s=15,
        memory_limit_bytes=int(2 * 1024**3),
        progress=False,
    )
    results = {r.id: r for r in grade.results}
    for cid, want in attack.expect.items():
        r = results[cid]
        if want == "pass":
            assert r.passed, f"{name}: {cid} should still pass, got: {r.message}"
        else:
            assert not r.passed and r.points == 0, f"{name}: {cid} should fail, but passed: {r.message}"
            if want != "fail":  # "a | b": either message (two defences, whichever catches it first)
                assert any(w in r.message for w in want.split(" | ")), (
                    f"{name}: {cid} message should mention {want!r}: {r.message}"
                )
    messages = " ".join(r.message for r in grade.results) + " ".join(grade.problems)
    for secret in attack.forbidden:
        assert secret not in messages, f"{name}: the report leaks {secret!r}: {messages[:1000]}"
    protocol = [f for f in grade.flags if f["kind"] == "protocol"]
    assert bool(protocol) == attack.flagged, f"{name}: protocol flags {protocol}"
    if attack.flagged and attack.zeroes_all:
        assert all("grading protocol was broken" in r.message for r in grade.results)
    elif attack.flagged:  # two answers disagreed: the checks it broke say so, and no check says the protocol broke
        assert not any("grading protocol was broken" in r.message for r in grade.results)
        assert all(f["message"].split(":", 1)[0] in attack.expect for f in protocol), protocol
    for rel, digest in before.items():
        assert _digest(rel) == digest, f"{name}: {rel} changed"
    for rel in attack.absent:
        assert not (ROOT / rel).exists(), f"{name}: {rel} was written"
    if attack.problem:
        assert any(attack.problem in p for p in grade.problems), f"{name}: load problems {grade.problems}"
    deadline = time.monotonic() + 10
    while _sandboxed_descendants() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _sandboxed_descendants(), "processes started by the submission outlived its grading"


def test_the_sandbox_is_on_here() -> None:
    """CI's machine has Landlock and seccomp: every attack above ran sandboxed, not merely contained."""
    from grader.runner import sandbox_report

    report = sandbox_report("require")
    assert report.active and report.landlock_abi >= 1, report.describe()


def test_static_scan_flags_the_tricks_for_review() -> None:
    cells = [
        "import gc\nimport coursekit.timing as T\nfrom grader.exercises.ex01.reference import smoothed_ce",
        "def f():\n    T._clock = lambda: 0\n    open('grader/exercises/ex01/hidden.py')\n    torch.cuda.Stream()",
    ]
    messages = " | ".join(str(f) for f in scan_cells(cells))
    for expected in ("imports gc", "grader's internals", "monkeypatches T._clock", "'grader/'", "side stream"):
        assert expected in messages, messages
    solution = [c.source for c in nbformat.read(SOLUTION_01, as_version=4).cells if c.cell_type == "code"]
    assert not scan_cells(solution)
    pathological = ["x = " + "(" * 200_000 + ")" * 200_000, "y = " + "+".join(["a"] * 200_000)]
    assert isinstance(scan_cells(pathological), list)  # the judge scans hostile source without falling over


@pytest.mark.parametrize("case", ["no code cells", "huge outputs", "binary garbage", "format 3 hiding a solution"])
def test_bad_notebooks_get_clear_zeros(tmp_path: Path, case: str) -> None:
    path = tmp_path / SOLUTION_01.name
    ids = ["ex01.smoothed_ce.values", "ex01.builtin.values"]
    if case == "no code cells":
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("my answers")]), path)
        want = "is not defined in your notebook"
    elif case == "huge outputs":
        nb = nbformat.read(SOLUTION_01, as_version=4)
        code = next(c for c in nb.cells if c.cell_type == "code")
        code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (30 * 1024**2))]
        nbformat.write(nb, path)
        want = None
    elif case == "format 3 hiding a solution":  # red team, session 32: Jupyter shows the worksheets, unsolved
        shown = nbformat.read(EXERCISE_01, as_version=4)
        doc = json.loads(nbformat.writes(nbformat.convert(shown, 3), version=3))
        doc["cells"] = json.loads(nbformat.writes(nbformat.read(SOLUTION_01, as_version=4)))["cells"]
        path.write_text(json.dumps(doc))
        want = "not in notebook format 4"
    else:
        path.write_bytes(bytes(range(256)) * 1000)
        want = "not UTF-8"
    grade = grade_notebook(path, "ex01", get_profile(), 3, check_ids=ids, progress=False)
    for r in grade.results:
        if want is None:
            assert r.passed, r.message
        else:
            assert not r.passed and want in r.message, r.message


def _cli(path: Path, report: Path, only: str, env: dict | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(path), "--report", str(report), "--no-progress", "--only", only],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text())


def test_a_cheat_does_not_stop_the_next_submission(tmp_path: Path) -> None:
    """Grade a crashing submission, then the solution, in one CLI run each: the second is unaffected."""
    crash = variant(
        SOLUTION_01,
        tmp_path / "crash" / SOLUTION_01.name,
        {"    optimizer.zero_grad(set_to_none=True)": "    import os\n    os._exit(9)"},
    )
    for path in (crash, SOLUTION_01):
        data = _cli(path, tmp_path / f"{path.parent.name}.json", "ex01.smoothed_ce.values,ex01.train_step.update")
        scores = {c["id"]: c["passed"] for c in data["checks"]}
        assert scores["ex01.smoothed_ce.values"]
        assert scores["ex01.train_step.update"] == (path == SOLUTION_01)


def test_the_secret_seed_never_reaches_learner_code(tmp_path: Path) -> None:
    """The judge starts with GRADER_SECRET_SEED in its environment; learner code reads every environment it can
    reach (its own, its ancestors') and raises with what it found: the seed is not among it."""
    leak = (
        "import os\n\nclass SmoothedCE:\n    def __init__(self, *a, **k):\n        seen = []\n"
        "        for pid in ['self', os.getppid(), os.getpgid(0)] + [int(p) for p in os.listdir('/proc') "
        "if p.isdigit()]:\n"
        "            try:\n"
        "                seen.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "            except OSError:\n                pass\n"
        "        raise RuntimeError(' '.join(seen) + ' ' + ' '.join(f'{k}={v}' for k, v in os.environ.items()))\n"
    )
    notebook = variant(EXERCISE_01, tmp_path / SOLUTION_01.name, {}, append=(leak,))
    data = _cli(
        notebook, tmp_path / "leak.json", "ex01.smoothed_ce.values", env={"GRADER_SECRET_SEED": "86420975-leak-canary"}
    )
    text = json.dumps(data)
    assert "86420975-leak-canary" not in text and "GRADER_SECRET_SEED" not in text
    assert not data["checks"][0]["passed"]


def test_the_naive_loss_fails_the_speed_checks(tmp_path: Path) -> None:
    """The baseline submitted as the answer measures about 1x: the honest control for the speed attacks above."""
    from tests.adversarial import NAIVE_CELL

    notebook = variant(SOLUTION_01, tmp_path / SOLUTION_01.name, NAIVE, append=(NAIVE_CELL,))
    grade = grade_notebook(notebook, "ex01", get_profile(), 5, check_ids=["ex01.smoothed_ce.speed"], progress=False)
    assert not grade.results[0].passed and 0.5 < grade.results[0].measured < 2.0, grade.results[0].message


def _graded_alone(
    tmp_path: Path, exercise: str, check_id: str, edits: dict | None = None, append: tuple = ()
) -> CheckResult:
    """Check ``check_id`` of ``exercise``'s reference solution with ``edits`` made and ``append`` cells added."""
    from tests.submissions import EXERCISES

    solution = EXERCISES[exercise][0]
    notebook = variant(solution, tmp_path / solution.name, edits or {}, append=append)
    return grade_notebook(notebook, exercise, get_profile(), 7, check_ids=[check_id], progress=False).results[0]


def test_a_timed_call_that_skips_its_backward_fails_the_speed_check(tmp_path: Path) -> None:
    """Exercise 2 times a forward and backward whose gradients land in the model's parameters. A learner who
    rewrites the timing probe to skip the backward returns the right outputs (the red team's 2.32x against an honest
    1.6x, session 16); the parameters' gradients in every call's fingerprint catch it, whatever the timing."""
    result = _graded_alone(tmp_path, "ex02", "ex02.scorer.speed", append=(SKIP_BACKWARD,))
    assert not result.passed and "did not compute what it should" in result.message, result.message


def test_a_timed_training_step_run_on_every_other_call_fails_the_speed_check(tmp_path: Path) -> None:
    """Exercise 3 times a training step, whose loss depends on every step before it. A learner who rewrites the
    timing probe to run the step on every other call only and return the last loss between (red team, session 18:
    2.51x against the reference's 1.2-1.3x) is caught: the judge's baseline trains in lockstep, on the same
    inputs in the same order, and every call's loss must match its own."""
    result = _graded_alone(tmp_path, "ex03", "ex03.step.speed", append=(SKIP_TRAINING_STEPS,))
    assert not result.passed and "did not compute what it should" in result.message, result.message


def test_a_timed_stream_that_skips_batches_fails_the_speed_check(tmp_path: Path) -> None:
    """Exercise 4 times a cold stream of 16 batches. Until session 18 the judge named, in its request, the three
    whose outputs it would check, and a rewritten probe that ran only those scored 3.06x against the reference's
    1.98x; now every batch's output comes back and the judge picks which to check after the answer arrived."""
    result = _graded_alone(tmp_path, "ex04", "ex04.stream.speed", append=(SKIP_STREAM_BATCHES,))
    assert not result.passed and "during timing" in result.message, result.message


def test_a_token_compile_with_every_block_eager_fails_the_compile_time_check(tmp_path: Path) -> None:
    """Exercise 6 times a cold regional capture. compile_blocks that compiles a token function for the counting
    backend and leaves the model eager had passed the check's only test of the capture, a frame counted, and
    measured 30.9x (flagged for review only above 17.2x); now a timed capture's graphs must hold a whole block."""
    result = _graded_alone(tmp_path, "ex06", "ex06.regional.compile_time", edits=TOKEN_COMPILE)
    assert not result.passed and "compiled no whole block" in result.message, result.message


def test_an_eager_stream_fails_the_stream_speed_check(tmp_path: Path) -> None:
    """Exercise 4's timed stream must be compiled: compile_tagger that returns the model unchanged pays no compile
    and had measured 29.4x (2 points) against the grader's statically compiled stream; now the graphs its backend
    received must hold the tagger."""
    result = _graded_alone(tmp_path, "ex04", "ex04.stream.speed", edits=EAGER_STREAM)
    assert not result.passed and "compiled no whole tagger" in result.message, result.message


def test_a_notebook_of_countless_flagged_cells_gets_a_bounded_list() -> None:
    """Red team, session 32: 300,000 tiny cells put 300,000 flags in the batch's report. A report lists
    ``MAX_FLAGS`` at most, tampering first, and one more flag counts the rest."""
    from grader.scan import MAX_FLAGS

    cells = ["import ctypes\n"] * (2 * MAX_FLAGS) + ["import grader.probing\n"]
    flags = scan_cells(cells)
    assert len(flags) == MAX_FLAGS and flags[-1].message.startswith(f"and {MAX_FLAGS + 2} more flags")
    assert any(f.kind == "tamper" and f.cell == 2 * MAX_FLAGS + 1 for f in flags), "the tampering is kept"
    assert [f.cell for f in flags[:-1]] == sorted(f.cell for f in flags[:-1])
