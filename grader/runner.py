"""Grade one notebook: the judge (this process) runs the checks; learner code runs in a sandboxed worker.

The judge reads the notebook itself (the worker never sees the file, only the code cells' text), scans it
for review flags, and runs each check, which asks the worker for observations and decides pass or fail
from its own references. A check that hangs past its timeout, kills its process, allocates past the memory
limit or fills the disk scores zero with a message saying so; the worker and everything it started are
ended, and the next check gets a fresh worker. A worker that breaks the protocol (an answer nobody asked
for, a malformed or out-of-turn message) zeroes the whole submission with a flag for an instructor; two answers
of the learner's code to the same question that disagree (``grader.protocol.InconsistentAnswer``) zero only the
check that got them, with the same flag.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from coursekit.profile import Profile
from grader import cgroups, judging, machine_lock, sandbox
from grader.context import Context
from grader.learner import RemoteLearner
from grader.learner_failures import WorkerLost
from grader.loader import NotebookError, read_cells
from grader.protocol import ProtocolError
from grader.registry import checks_for, get
from grader.results import CheckResult, run_check
from grader.scan import Flag, scan_cells
from grader.worker_limits import Limits, default_memory_limit

CHECK_TIMEOUT_S = {"cpu": 240.0, "cuda": 300.0}
# below this, a correct solution's check can run out of time: a learner's code compiles cold, and one correct
# exercise 2 speed check did at 60 s in an instructor's trial of class grading on a 2-core CPU (session 40; the
# slowest reference check takes 21 s there, warm caches, nothing else running). README, "Time limits"
SAFE_CHECK_TIMEOUT_S = 120.0
_warned_timeout = False
NOTEBOOK_BUDGET_S = {"cpu": 1200.0, "cuda": 1800.0}


class SandboxRequired(RuntimeError):
    """Grading for a class needs the sandbox, and this machine cannot provide it."""


@dataclass
class NotebookGrade:
    """All results for one notebook, with load problems, review flags and the sandbox it ran in."""

    notebook: str
    exercise: str
    results: list[CheckResult]
    problems: list[str] = field(default_factory=list)
    flags: list[dict] = field(default_factory=list)
    sandbox: str = ""
    peak_tasks: int = 0  # the most threads and processes its workers ran at once, as the judge polled them

    @property
    def score(self) -> float:
        return sum(r.points for r in self.results)

    @property
    def max_score(self) -> int:
        return sum(r.max_points for r in self.results)


def sandbox_report(policy: str = "prefer") -> sandbox.Report:
    """What grading here runs under. ``policy``: ``require`` (a class: refuse without it), ``prefer`` (use
    it where the machine has it, and say so either way) or ``off`` (``--unsandboxed``)."""
    report = sandbox.probe(wanted=policy != "off")
    if policy == "require" and not report.active:
        raise SandboxRequired(
            f"grading a class needs the sandbox, and {report.why_not}. Run on Linux 5.13+ with "
            "Landlock, or pass --unsandboxed to grade without it (every report will say so)."
        )
    return report


def is_reference_solution(notebook: Path) -> bool:
    """True for a notebook in this repository's ``solutions/`` (instructor code, trusted to seed caches)."""
    from grader.worker_start import ROOT

    try:
        return notebook.resolve().parent == (ROOT / "solutions").resolve()
    except OSError:
        return False


def _zero_all(grade: NotebookGrade, order: list[str], why: str) -> None:
    from grader.judging import protocol_cause

    message = (
        f"the grading protocol was broken ({why}): {protocol_cause(why)}, so this submission scores zero and is "
        "flagged for an instructor to review"
    )
    grade.results = [CheckResult.failed(get(cid), message) for cid in order]
    grade.flags.append({"cell": 0, "line": 0, "kind": "protocol", "message": why})


def _warn_short(timeout: float) -> None:
    """Say once per process that a check limit under ``SAFE_CHECK_TIMEOUT_S`` can fail correct work."""
    global _warned_timeout
    if timeout < SAFE_CHECK_TIMEOUT_S and not _warned_timeout:
        _warned_timeout = True
        print(
            f"grader: each check stops after {timeout:.0f} s, under the {SAFE_CHECK_TIMEOUT_S:.0f} s a correct "
            "solution's check may need (its code compiles cold; a busy machine is slower): correct work can fail with "
            "'no answer from ...'. Raise GRADER_CHECK_TIMEOUT or --check-timeout for a grade",
            file=sys.stderr,
        )


def grade_notebook(
    notebook: Path,
    exercise: str,
    profile: Profile,
    secret: str | int,
    *,
    check_ids: list[str] | None = None,
    check_timeout_s: float | None = None,
    memory_limit_bytes: int | None = None,
    budget_s: float | None = None,
    progress: bool = True,
    sandbox_policy: str = "prefer",
    ctx: Context | None = None,
) -> NotebookGrade:
    """Run ``exercise``'s checks (or ``check_ids``) on ``notebook``; learner code runs in sandboxed workers.

    Grading a reference solution (a notebook in ``solutions/``) also keeps the kernels its worker compiled, as
    the seed of later workers' compile caches, for every exercise (``RemoteLearner.harvest``)."""
    order = check_ids or [c.id for c in checks_for(exercise)]
    report = sandbox_report(sandbox_policy)
    deadline = time.monotonic() + (budget_s or NOTEBOOK_BUDGET_S[profile.device_class])  # reading and scanning too
    grade = NotebookGrade(str(notebook), exercise, [], sandbox=f"{report.describe()}; {cgroups.describe()}")
    try:
        cells = read_cells(notebook)
    except NotebookError as exc:
        grade.results = [CheckResult.failed(get(cid), str(exc)) for cid in order]
        return grade
    try:
        grade.flags = [f.as_dict() for f in scan_cells(cells)]
    except Exception as exc:  # noqa: BLE001 - a scan that fails on learner text must not end the grading
        grade.flags = [Flag(0, 0, "review", f"the code scan failed ({exc!r})").as_dict()]
    ctx = ctx or Context.create(profile, secret)
    judging.use_device_class(profile.device_class)
    timeout = check_timeout_s or CHECK_TIMEOUT_S[profile.device_class]
    _warn_short(timeout)
    limits = Limits(memory_limit_bytes or default_memory_limit(), timeout)
    done: dict[str, CheckResult] = {}
    # disable=None: a bar on a terminal only; a piped or logged run gets none (a blind attendee, session 45, found the
    # bar's last line run into the score line in a log)
    bar = tqdm(
        total=len(order),
        desc=f"grading {Path(notebook).name}",
        unit="check",
        disable=None if progress else True,
        leave=False,
    )
    with (
        tempfile.TemporaryDirectory(prefix="grader-") as tmp,
        RemoteLearner(cells, exercise, profile, limits, report=report, workdir=Path(tmp)) as learner,
    ):
        try:
            for cid in order:
                check = get(cid)
                if time.monotonic() >= deadline:
                    done[cid] = CheckResult.failed(
                        check, "the notebook's total grading time budget ran out before this check could run"
                    )
                    continue
                if why := learner.stop_reason():  # the watch ended the worker since the last check: this one says so
                    learner.close_worker()
                    done[cid] = CheckResult.failed(check, why)
                    bar.update(1)
                    continue
                # everything this judge asks of its worker happens under the machine's lock (see machine_lock)
                with machine_lock.checking(exclusive=check.kind == "speed"):
                    if check.fresh or not learner.alive:
                        try:
                            learner.start(fresh=check.fresh)
                        except WorkerLost as exc:  # the notebook cannot even be loaded: every check left fails
                            for rest in order[order.index(cid) :]:
                                done[rest] = CheckResult.failed(get(rest), str(exc))
                            break
                        grade.problems = learner.problems
                    learner.deadline = min(deadline, time.monotonic() + timeout)
                    result = run_check(check, learner, ctx)
                done[cid] = result
                if why := getattr(result, "protocol_flag", ""):  # two answers disagreed: this check only, flagged
                    grade.flags.append({"cell": 0, "line": 0, "kind": "protocol", "message": f"{cid}: {why}"})
                if getattr(result, "replace_worker", False):
                    learner.close_worker()
                bar.update(1)
        except ProtocolError as exc:
            learner.close_worker()
            _zero_all(grade, order, str(exc))
            bar.close()
            grade.peak_tasks = learner.peak_tasks
            return grade
        if is_reference_solution(Path(notebook)):
            learner.harvest()
        grade.peak_tasks = learner.peak_tasks
    bar.close()
    grade.results = [done[cid] for cid in order]
    return grade
