"""The adversarial corpus: every trick is caught or contained with the right message, and the rest still grades."""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from adversarial import CHEATS
from coursekit.profile import get_profile
from grader.runner import grade_notebook
from grader.scan import scan_cells
from submissions import SOLUTION_01, variant

pytestmark = pytest.mark.slow


def _leftover_sleepers() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if (p.info.get("cmdline") or [])[:2] == ["sleep", "317"]:
            found.append(p)
    return found


@pytest.mark.parametrize("name", list(CHEATS))
def test_cheat_is_caught_or_contained(tmp_path: Path, name: str) -> None:
    edits, expected = CHEATS[name]
    notebook = variant(SOLUTION_01, tmp_path / SOLUTION_01.name, edits)
    grade = grade_notebook(notebook, "ex01", get_profile(), 99, check_ids=list(expected), check_timeout_s=12,
                           memory_limit_bytes=int(1.5 * 1024**3), progress=False)
    results = {r.id: r for r in grade.results}
    for cid, want in expected.items():
        r = results[cid]
        if want == "pass":
            assert r.passed, f"{name}: {cid} should still pass, got: {r.message}"
        else:
            assert not r.passed and r.points == 0, f"{name}: {cid} should fail, but passed: {r.message}"
            assert want in r.message, f"{name}: {cid} message should mention {want!r}: {r.message}"
    deadline = time.monotonic() + 10
    while _leftover_sleepers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _leftover_sleepers(), "processes started by the submission outlived its grading"


def test_static_scan_flags_the_tricks() -> None:
    cells = ["import gc\nimport coursekit.timing as T\nfrom grader.reference.ex01 import smoothed_ce",
             "def f():\n    T._clock = lambda: 0\n    open('grader/reference/ex01.py')\n    torch.cuda.Stream()"]
    flags = scan_cells(cells)
    messages = " | ".join(str(f) for f in flags)
    for expected in ("imports gc", "grader's internals", "monkeypatches T._clock", "'grader/'", "side stream"):
        assert expected in messages, messages
    assert not scan_cells(nbformat.read(SOLUTION_01, as_version=4) and
                          [c.source for c in nbformat.read(SOLUTION_01, as_version=4).cells if c.cell_type == "code"])


@pytest.mark.parametrize("case", ["no code cells", "huge outputs", "binary garbage"])
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
    else:
        path.write_bytes(bytes(range(256)) * 1000)
        want = "not UTF-8"
    grade = grade_notebook(path, "ex01", get_profile(), 3, check_ids=ids, progress=False)
    for r in grade.results:
        if want is None:
            assert r.passed, r.message
        else:
            assert not r.passed and want in r.message, r.message


def test_a_cheat_does_not_stop_the_next_submission(tmp_path: Path) -> None:
    """Grade a crashing submission, then the solution, in one CLI run over a folder of both."""
    import subprocess
    import sys

    from submissions import ROOT

    crash = variant(SOLUTION_01, tmp_path / "crash" / SOLUTION_01.name,
                    {"    optimizer.zero_grad(set_to_none=True)": "    import os\n    os._exit(9)"})
    for path in (crash, SOLUTION_01):
        report = tmp_path / f"{path.parent.name}.json"
        proc = subprocess.run([sys.executable, "-m", "grader", str(path), "--report", str(report), "--no-progress",
                               "--only", "ex01.smoothed_ce.values,ex01.train_step.update"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        data = json.loads(report.read_text())
        scores = {c["id"]: c["passed"] for c in data["checks"]}
        assert scores["ex01.smoothed_ce.values"]
        assert scores["ex01.train_step.update"] == (path == SOLUTION_01)
