"""``make gpu-check``'s plumbing, on the CPU: discovered steps, resuming, the call budget, the packed results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from coursekit.lessons import lessons
from coursekit.results import slug
from grader import sandbox
from tests.submissions import EXERCISES

ROOT = Path(__file__).resolve().parent.parent


def gpu_check(*args: str) -> str:
    env = {**os.environ, "COURSEKIT_DEVICE": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.gpu_check", "--profile", "smoke", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def test_every_lesson_and_exercise_has_its_steps(tmp_path: Path) -> None:
    listed = gpu_check("--out", str(tmp_path), "--list")
    names = {line.split()[0] for line in listed.splitlines()}
    for lesson in lessons():
        assert {f"lesson-{lesson.number:02d}", f"grade-{lesson.id}"} <= names
        wrong = {slug(name) for name in EXERCISES[lesson.id][2]}
        assert wrong and {f"wrong-{lesson.id}/{s}" for s in wrong} <= names, "a step for each wrong submission"
    assert {"env", "sandbox", "calibrate"} <= names


def test_a_step_that_finished_is_not_run_again_and_the_results_pack(tmp_path: Path) -> None:
    out, pack = tmp_path / "results", tmp_path / "results.tgz"
    assert "0/1 steps done" in gpu_check("--out", str(out), "--steps", "env", "--budget-s", "0")  # budget spent
    first = gpu_check("--out", str(out), "--steps", "env", "--pack", str(pack))
    state = json.loads((out / "steps.json").read_text())
    assert state["env"]["status"] == "ok" and "1/1 steps done" in first
    env = json.loads((out / "env.json").read_text())
    assert env["torch"] and env["traffic"]["item"]["syncs"] == 1
    assert env["traffic"]["a tensor from Python data"]["host_tensors"] == 1
    with tarfile.open(pack) as tar:
        assert f"{out.name}/steps.json" in tar.getnames()
    again = gpu_check("--out", str(out), "--steps", "env")
    assert "env:" not in again and "1/1 steps done" in again  # resumed: nothing to run


def test_a_notebook_cut_while_its_kernel_shut_down_counts_as_done(tmp_path: Path) -> None:
    """Lesson 4 on the H200 run: every cell ran, then the step's limit came during the kernel's shutdown. Its
    verdict says so, and the next call must not run it again; a verdict from an earlier call, one that stopped
    between cells, or one with a failed cell does not count."""
    import time

    from tools.gpu_check import Step, finished_before_cut

    verdict = tmp_path / "04_dynamic_shapes.json"
    step = Step("lesson-04", ("true",), "04_dynamic_shapes.ipynb", verdict)
    since = time.time() - 1
    assert not finished_before_cut(step, since)  # no verdict written
    for record, done in [
        ({"verdict": "ok", "cells_run": 26, "code_cells": 26}, True),
        ({"verdict": "stopped after 20 of 26 code cells", "cells_run": 20, "code_cells": 26}, False),
        ({"verdict": "error: RuntimeError: boom", "cells_run": 12, "code_cells": 26}, False),
    ]:
        verdict.write_text(json.dumps(record))
        assert finished_before_cut(step, since) is done, record
    assert not finished_before_cut(step, time.time() + 60), "a verdict older than this call's start is not this call's"
    assert not finished_before_cut(Step("env", ("true",), "versions"), since)


def test_calibrate_resumes_with_the_checks_it_has_not_measured(tmp_path: Path, monkeypatch) -> None:
    """A calibrate step cut by a call's limit goes on where it stopped: checks already in the results folder's file
    with enough runs are not measured again, and the file is written there, inside what a call packs."""
    from coursekit.profile import get_profile
    from grader.calibrate import render
    from grader.context import calibration_name
    from tools import gpu_check as gc

    monkeypatch.setenv("COURSEKIT_DEVICE", "cpu")
    folder = tmp_path / "calibration"
    folder.mkdir()
    text, _ = render({"ex01.compiled.speed": [90.0, 95.0], "ex02.scorer.speed": [1.3]}, fraction=0.25, runs=2)
    (folder / calibration_name(get_profile())).write_text(text)
    calls = []
    monkeypatch.setattr(gc.subprocess, "call", lambda argv, cwd: calls.append(argv) or 0)
    assert gc.calibrate_step(tmp_path, runs=2) == 0
    (argv,) = calls
    assert argv[argv.index("--out") + 1] == str(folder)
    only = set(argv[argv.index("--only") + 1].split(","))
    assert "ex01.compiled.speed" not in only and {"ex02.scorer.speed", "ex06.regional.compile_time"} <= only


@pytest.mark.skipif(not sandbox.probe().active, reason="no sandbox here")
def test_sandbox_cuda_trials_differ_in_what_they_refuse() -> None:
    """Each trial of ``tools.sandbox_cuda`` applies what its name says (a review, session 39, found trials that
    applied the same filter): UNIX datagram sockets refused by ``seccomp`` alone, and an allowed call allowed."""
    import socket

    from tools import sandbox_cuda

    def stages(_scratch):
        return [
            ("datagram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close()),
            ("affinity", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))),
        ]

    names = {name for name, _ in sandbox_cuda.trials(ladder=False)}
    assert {"worker", "seccomp-dgram", "seccomp"} <= names
    assert sandbox_cuda.trial({"seccomp"}, stages)["failed"] == "datagram"
    assert sandbox_cuda.trial({"seccomp", "datagrams"}, stages)["failed"] == "affinity"
    gpu = any(Path("/dev").glob("nvidia*"))  # a worker whose policy opens a GPU keeps datagrams (grader.sandbox.enter)
    assert sandbox_cuda.trial({"env", "worker"}, stages)["failed"] == ("affinity" if gpu else "datagram")
    assert sandbox_cuda.trial({"seccomp", "datagrams", "allow:sched_setaffinity"}, stages)["ok"]


# What tools/gpu_wheels.txt's header says the GPU machine's Python already has (it must name each of them).
PREINSTALLED = (
    "torch",
    "torchvision",
    "timm",
    "numpy",
    "matplotlib",
    "tensorboard",
    "pytest",
    "rich",
    "tqdm",
    "psutil",
    "safetensors",
)
GPU_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "extra": ""}


def test_gpu_wheels_bring_every_dependency_the_machine_lacks() -> None:
    """Every dependency of a listed wheel is listed too or comes with what the GPU machine already has: a Python 3.12
    with torch 2.11 and the header's packages stopped the grader at ``import nbformat`` without ``attrs`` (a
    rehearsal with ``pip install --target``, session 44; ``ipykernel``'s ``nest-asyncio2`` was missing too). The
    requirements are read from this environment's copies, which match the listed versions or nearly."""
    from importlib import metadata

    from packaging.requirements import Requirement

    def key(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    def needs(name: str, installed: bool = False) -> set[str]:
        try:
            found = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            assert not installed, f"{name} is not installed here, so its requirements cannot be read"
            return set()  # something a preinstalled package needs only elsewhere
        reqs = (Requirement(r) for r in found)
        return {key(r.name) for r in reqs if r.marker is None or r.marker.evaluate(GPU_PYTHON)}

    text = (ROOT / "tools" / "gpu_wheels.txt").read_text()
    header = " ".join(line for line in text.splitlines() if line.startswith("#"))
    assert all(name in header for name in PREINSTALLED), "the header must name what the machine already has"
    listed = {key(line.split("==")[0]) for line in text.splitlines() if line and not line.startswith("#")}
    there, todo = set(), [key(n) for n in PREINSTALLED]
    while todo:  # what the machine's packages bring with them
        name = todo.pop()
        if name not in there:
            there.add(name)
            todo += needs(name)
    missing = {f"{dep} (for {name})" for name in listed for dep in needs(name, installed=True) - listed - there}
    assert not missing, f"add to tools/gpu_wheels.txt: {sorted(missing)}"


def test_a_wrong_submissions_speed_is_judged_only_where_it_must_fail() -> None:
    """As in tests/test_grader.py: a speed check counts only for a submission that must fail it. A broken protocol
    fails every check, its speed check too, which exercise 2's "break-free only the first time" does not list (the
    suite does not time it): the CPU rehearsal of session 44 called that submission BAD."""
    from tools.gpu_check import as_expected

    def check(cid: str, kind: str, passed: bool) -> dict:
        return {"id": cid, "kind": kind, "passed": passed}

    broken = [check("ex.values", "correctness", False), check("ex.speed", "speed", False)]
    assert as_expected(broken, {"ex.values"}) == (True, {"ex.values", "ex.speed"}, {"ex.speed": False})
    slow = [check("ex.values", "correctness", True), check("ex.speed", "speed", True)]
    assert as_expected(slow, {"ex.speed"})[0] is False  # must fall short of the speed, and did not
    assert as_expected([check("ex.values", "correctness", True)], {"ex.values"})[0] is False
    assert as_expected([], {"ex.values"})[0] is False  # no report


def test_a_wrong_step_names_an_unknown_submission_without_grading(tmp_path: Path, capsys) -> None:
    """``wrong exNN <dir> <name>`` with a name the exercise lacks (a renamed submission in an old steps list) says so
    and fails at once, before any grading or summary."""
    from tools.gpu_check import wrong_step

    assert wrong_step("ex00", tmp_path, "no such submission") == 2
    assert "no wrong submission named 'no such submission'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
