"""``python -m grader batch DIR``: grade a whole class, resumably, with a bounded pool of workers.

``DIR`` holds one folder per student, with that student's exercise notebooks at any depth
(``DIR/<student>/01_cross_entropy_ladder.ipynb``, or nbgrader's ``submitted/<student>/ex01/...``).
Each submission (one student's notebook for one exercise) is graded by
``grader.runner.grade_notebook``, in processes of its own, exactly as ``python -m grader`` grades it.
Before grading, locked cells a learner deleted or edited are restored from the released notebooks
(``--restore-from``, default ``exercises/``), as ``make autograde`` does, and the repairs are reported.

Results go to ``--out`` (default ``reports/batch``): ``<student>/<exercise>.json`` per submission (the
same report as ``python -m grader``, plus the student, the notebook's sha256 and any repairs),
``summary.csv`` (one row per student and check) and ``scores.csv`` (one row per submission).  A re-run
skips every submission already graded from the same notebook content with the same checks, so a batch
that was stopped resumes where it was; ``--force`` regrades everything.

Engines:

* ``local`` (default): a pool of worker slots on this machine.  On CUDA there is one slot per GPU,
  each pinned to its GPU with ``CUDA_VISIBLE_DEVICES``, so a submission has a GPU to itself while it
  is timed; on CPU a small pool (``--workers``, default half the cores, at most 4).  A slot whose process dies
  breaks the pool; the submissions it took with it are graded again, one at a time in a fresh pool, so only the
  one that kills its slot twice scores a zero for it.
* ``ray``: the same jobs as Ray tasks, for a class that outgrows one machine: on the cluster at
  ``--ray-address`` (or ``RAY_ADDRESS``), else on a local Ray instance.  A task asks Ray for one GPU on
  CUDA (Ray then sets ``CUDA_VISIBLE_DEVICES`` for it) or one CPU.  Notebooks travel to the tasks as
  bytes and reports travel back, so only this machine needs the submissions and writes results.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from coursekit.profile import get_profile
from grader import spreadsheet
from grader.context import Context
from grader.interface import NOTEBOOKS, exercise_for, loose_notebook, not_an_exercise
from grader.loader import NotebookError, check_size, submission_bytes
from grader.registry import checks_for, get
from grader.report import build_report
from grader.results import CheckResult
from grader.runner import (
    CHECK_TIMEOUT_S,
    NOTEBOOK_BUDGET_S,
    NotebookGrade,
    SandboxRequired,
    grade_notebook,
    sandbox_report,
)

SUMMARY_FIELDS = ["student", "exercise", *spreadsheet.CHECK_COLUMNS]


@dataclass(frozen=True)
class Job:
    """One submission: a student's notebook for one exercise, and where its report goes."""

    student: str
    exercise: str
    notebook: Path
    sha256: str
    report: Path
    unreadable: str = ""  # why the file is no notebook to grade (a link, a folder, a pipe, too big): a zero, and why


# what a batch writes in --out beside the students' folders: a student folder of one of these names is not graded
OUTPUTS = ("summary.csv", "scores.csv")


def sha256(path: Path) -> str:
    return hashlib.sha256(submission_bytes(path)).hexdigest()


def _modified(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def discover(folder: Path, out: Path) -> tuple[list[Job], list[str]]:
    """Every ``DIR/<student>/**/NN_*.ipynb``; warnings for files that are not submissions."""
    jobs: dict[tuple[str, str], Job] = {}
    warnings = []
    for loose in sorted(folder.glob("*.ipynb")):
        warnings.append(f"{loose}: {loose_notebook(loose, folder)}; skipped")
    for student in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if student.is_symlink() or student.name in OUTPUTS:
            why = "a symbolic link" if student.is_symlink() else f"named like the batch's own {student.name}"
            warnings.append(f"{student}: a student folder {why}; skipped")
            continue
        for notebook in sorted(student.rglob("*.ipynb"), key=_modified):  # rglob follows no linked folder
            if ".ipynb_checkpoints" in notebook.parts:
                continue
            exercise = exercise_for(notebook)
            if exercise is None:
                warnings.append(f"{notebook}: {not_an_exercise(notebook)}; skipped")
                continue
            key = (student.name, exercise)
            if key in jobs:
                warnings.append(f"{student.name} has two {exercise} notebooks; grading the newer, {notebook.name}")
            report = out / student.name / f"{exercise}.json"
            try:
                jobs[key] = Job(student.name, exercise, notebook, sha256(notebook), report)
            except NotebookError as exc:
                warnings.append(f"{notebook}: {exc}; it scores zero")
                jobs[key] = Job(student.name, exercise, notebook, "", report, unreadable=str(exc))
    return sorted(jobs.values(), key=lambda j: (j.student, j.exercise)), warnings


def is_done(job: Job, ids: list[str]) -> bool:
    """A report exists for this notebook content and these checks."""
    if job.unreadable:
        return False
    try:
        data = json.loads(job.report.read_text())
    except (OSError, ValueError):
        return False
    return data.get("sha256") == job.sha256 and [c["id"] for c in data.get("checks", [])] == ids


def grade_job(
    student: str,
    exercise: str,
    notebook: str,
    content: bytes,
    check_ids: list[str],
    secret: str,
    restore_from: str | None,
    check_timeout_s: float | None,
    budget_s: float | None,
    profile_name: str | None = None,
    device: str | None = None,
    sandbox_policy: str = "require",
) -> dict:
    """Grade one submission here (a local slot or a Ray task) and return its report."""
    import nbformat

    from grader.restore import restore_locked_cells

    started = time.monotonic()
    profile = get_profile(profile_name, device)
    ctx = Context.create(profile, secret)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="batch-") as tmp:
        path = Path(tmp) / NOTEBOOKS[exercise]
        path.write_bytes(content)
        released = Path(restore_from) / NOTEBOOKS[exercise] if restore_from else None
        if released is not None and released.is_file():
            try:
                check_size(content, NOTEBOOKS[exercise])  # before nbformat builds a node for every value
                nb = nbformat.reads(content.decode("utf-8"), as_version=4)
                notes = restore_locked_cells(nb, nbformat.read(released, as_version=4))
                if notes:
                    nbformat.write(nb, path)
            except Exception as exc:  # noqa: BLE001 - graded as it is: the grader says what is wrong with it
                notes = [f"locked cells were not checked: the notebook is not one nbformat reads ({exc!r:.200})"]
            nb = None  # no longer needed while it is graded
        grade = grade_notebook(
            path,
            exercise,
            profile,
            ctx.secret,
            check_ids=check_ids,
            ctx=ctx,
            check_timeout_s=check_timeout_s,
            budget_s=budget_s,
            progress=False,
            sandbox_policy=sandbox_policy,
        )
    grade.notebook = notebook
    report = build_report([grade], profile, ctx.describe_thresholds())
    report.update(
        student=student,
        exercise=exercise,
        submission=notebook,
        sha256=hashlib.sha256(content).hexdigest(),
        integrity=notes,
        threshold_sources={c: ctx.threshold_source(c) for c in check_ids if get(c).kind == "speed"},
        host=socket.gethostname(),
        gpu=os.environ.get("CUDA_VISIBLE_DEVICES"),
        seconds=round(time.monotonic() - started, 2),
    )
    return report


def failed_report(job: Job, ids: list[str], message: str) -> dict:
    """A zero for every check of ``job`` when its grading itself broke (not the learner's code)."""
    profile = get_profile()
    grade = NotebookGrade(str(job.notebook), job.exercise, [CheckResult.failed(get(c), message) for c in ids])
    report = build_report([grade], profile, Context.create(profile, 0).describe_thresholds())
    report.update(
        student=job.student, exercise=job.exercise, submission=str(job.notebook), sha256="", integrity=[], error=message
    )
    return report


def write_report(path: Path, report: dict) -> None:
    """Atomically, so a stopped batch never leaves a half-written report behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(report, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def write_summary(out: Path, jobs: list[Job]) -> tuple[Path, Path]:
    """``summary.csv`` (student x check) and ``scores.csv`` (one row per submission) from the reports."""
    summary, scores = out / "summary.csv", out / "scores.csv"
    out.mkdir(parents=True, exist_ok=True)
    with summary.open("w", newline="") as fs, scores.open("w", newline="") as fc:
        rows = csv.DictWriter(fs, fieldnames=SUMMARY_FIELDS)
        totals = csv.DictWriter(
            fc, fieldnames=["student", "exercise", "score", "max_score", "integrity", "thresholds", "report"]
        )
        rows.writeheader()
        totals.writeheader()
        for job in jobs:
            try:
                report = json.loads(job.report.read_text())
            except (OSError, ValueError):
                continue
            for c in report["checks"]:
                rows.writerow(
                    spreadsheet.row(
                        {
                            "student": job.student,
                            "exercise": job.exercise,
                            "check": c["id"],
                            **{k: c[k] for k in spreadsheet.CHECK_COLUMNS[1:] if k != "thresholds"},
                            "thresholds": report["thresholds"] if c["kind"] == "speed" else "",
                        }
                    )
                )
            totals.writerow(
                spreadsheet.row(
                    {
                        "student": job.student,
                        "exercise": job.exercise,
                        "score": report["score"],
                        "max_score": report["max_score"],
                        "integrity": "; ".join(report.get("integrity", [])),
                        "thresholds": report["thresholds"],
                        "report": str(job.report),
                    }
                )
            )
    return summary, scores


def score_table(jobs: list[Job]):
    """A ``rich`` table of the class: one row per student, one column per exercise, each cell ``score/max`` from
    its report (``*``: integrity notes in scores.csv; ``-``: no report)."""
    from rich.table import Table

    exercises = sorted({j.exercise for j in jobs})
    cells: dict[str, dict[str, str]] = {}
    noted = False
    for job in jobs:
        try:
            report = json.loads(job.report.read_text())
            cell = f"{report['score']:g}/{report['max_score']:g}"
        except (OSError, ValueError, KeyError, TypeError):
            cell = "-"
        else:
            if report.get("integrity"):
                cell, noted = cell + " *", True
        cells.setdefault(job.student, {})[job.exercise] = cell
    table = Table(title="scores", caption="*: notes in scores.csv" if noted else None)
    table.add_column("student")
    for exercise in exercises:
        table.add_column(exercise, justify="right")
    for student in sorted(cells):
        table.add_row(student, *(cells[student].get(ex, "") for ex in exercises))
    return table


def cuda_slots(limit: int | None) -> list[str]:
    """The GPUs this machine may use (respecting ``CUDA_VISIBLE_DEVICES``), one slot each."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = (
        [g.strip() for g in visible.split(",") if g.strip()]
        if visible
        else [str(i) for i in range(torch.cuda.device_count())]
    )
    return gpus[:limit] if limit else gpus


def default_cpu_workers() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, cores // 2))


def slot_cores(workers: int) -> list[set[int] | None]:
    """Disjoint sets of this process's cores, one per local slot (``None`` each where there are fewer cores than
    slots): a slot's judge and learner processes then time on cores no other slot uses
    (``grader.containment.timing_cores`` picks from the slot's own)."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if workers < 2 or len(allowed) < workers:
        return [None] * workers
    share = len(allowed) // workers
    return [set(allowed[i * share : (i + 1) * share]) for i in range(workers)]


def _pin_slot(devices) -> None:
    """Initializer of a local slot: take one GPU (or none) and a share of the cores for every submission this
    process grades."""
    device, cores = devices.get()
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    if cores:
        os.sched_setaffinity(0, cores)


# submissions read into memory and queued per worker; the rest wait on disk until a worker is nearly free
QUEUED_PER_WORKER = 2


class _SlotDied(Exception):
    """A grading slot's process ended while this job was on it (the pool is broken; not the learner's result)."""


def _drain(waiting: deque[Job], submit, wait_any, on_done, window: int) -> list[Job]:
    """Grade ``waiting`` with at most ``window`` jobs in flight; return the jobs lost because a slot died.

    ``submit(job)`` starts a job and returns its handle; ``wait_any(handles)`` returns ``[(handle, outcome)]`` for
    some that finished, where an outcome is a report, an exception, or ``_SlotDied``. A job whose notebook could
    not be read any more (it changed since it was found) is done at once, as a zero that says why."""
    pending: dict = {}
    lost: list[Job] = []
    while waiting or pending:
        while waiting and len(pending) < window and not lost:
            job = waiting.popleft()
            try:
                pending[submit(job)] = job
            except NotebookError as exc:
                on_done(job, exc)
            except _SlotDied:
                lost.append(job)
        if not pending:
            break
        for handle, outcome in wait_any(list(pending)):
            job = pending.pop(handle)
            if isinstance(outcome, _SlotDied):
                lost.append(job)
                continue
            try:
                on_done(job, outcome)
            except Exception as exc:  # noqa: BLE001 - a report that could not be taken in is a zero that says why
                on_done(job, exc)
    return lost


def _local_outcomes(futures) -> list:
    done, _ = wait(futures, return_when=FIRST_COMPLETED)
    out = []
    for future in done:
        try:
            out.append((future, future.result()))
        except BrokenProcessPool:
            out.append((future, _SlotDied()))
        except Exception as exc:  # noqa: BLE001 - a broken grading must not lose the other results
            out.append((future, exc))
    return out


def run_local(jobs: list[Job], make_args, workers: int, gpus: list[str], on_done, fn=grade_job) -> None:
    """Grade ``jobs`` with ``fn`` in a pool of ``workers`` slots, each pinned to its GPU (if any) and cores.

    A slot that dies (the judge crashed or was killed: learner code runs in sandboxed processes of its own) breaks
    the pool. The jobs it took with it are then graded again, one at a time in a fresh pool, so the one that kills
    its slot again scores a zero that says so and every other submission is still graded."""
    ctx = mp.get_context("spawn")
    waiting, suspects = deque(jobs), deque()

    def submit_to(pool):
        def submit(job: Job):
            try:
                return pool.submit(fn, *make_args(job))
            except BrokenProcessPool as exc:
                raise _SlotDied from exc

        return submit

    while waiting or suspects:
        devices = ctx.Queue()
        for i, cores in enumerate(slot_cores(workers)):
            devices.put((gpus[i] if gpus else None, cores))
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_pin_slot, initargs=(devices,)
        ) as pool:
            if suspects:  # alone in this pool: if it dies again, it was the one
                job = suspects.popleft()
                if _drain(deque([job]), submit_to(pool), _local_outcomes, on_done, 1):
                    on_done(job, _SlotDied("its grading process died twice while grading it"))
                continue
            lost = _drain(waiting, submit_to(pool), _local_outcomes, on_done, QUEUED_PER_WORKER * workers)
        if lost:
            print(f"a grading slot died; grading the {len(lost)} submission(s) it took with it again", file=sys.stderr)
        suspects.extend(lost)


def run_ray(jobs: list[Job], make_args, workers: int, cuda: bool, address: str | None, on_done) -> None:
    """Grade ``jobs`` as Ray tasks; Ray runs a task again once if its worker process dies."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    options = (
        {"address": address} if address else {"num_cpus": workers, "num_gpus": len(cuda_slots(None)) if cuda else 0}
    )
    ray.init(include_dashboard=False, log_to_driver=False, **options)
    try:
        task = ray.remote(num_cpus=1, num_gpus=1 if cuda else 0, max_retries=1)(grade_job)

        def outcomes(refs) -> list:
            done, _ = ray.wait(refs, num_returns=1)
            out = []
            for ref in done:
                try:
                    out.append((ref, ray.get(ref)))
                except Exception as exc:  # noqa: BLE001 - a broken grading must not lose the other results
                    out.append((ref, exc))
            return out

        window = QUEUED_PER_WORKER * max(workers, int(ray.cluster_resources().get("GPU" if cuda else "CPU", 1)))
        _drain(deque(jobs), lambda job: task.remote(*make_args(job)), outcomes, on_done, window)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader batch", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="one folder per student, each with exercise notebooks")
    parser.add_argument("--out", type=Path, default=Path("reports/batch"), help="reports and CSVs (reports/batch)")
    parser.add_argument(
        "--workers", type=int, help="parallel submissions (default: one per GPU on CUDA, half the cores up to 4 on CPU)"
    )
    parser.add_argument(
        "--timeout", type=float, help="seconds a whole submission may take (default: the grader's per-notebook budget)"
    )
    parser.add_argument(
        "--check-timeout",
        type=float,
        help="seconds one check may take (default: GRADER_CHECK_TIMEOUT, else the grader's per-check timeout)",
    )
    parser.add_argument("--only", help="comma-separated check ids to run")
    parser.add_argument("--force", action="store_true", help="regrade submissions graded before")
    parser.add_argument(
        "--restore-from",
        type=Path,
        default=Path("exercises"),
        help="released notebooks to restore deleted or edited locked cells from (default exercises/)",
    )
    parser.add_argument("--no-restore", action="store_true", help="grade notebooks exactly as submitted")
    parser.add_argument("--engine", choices=("local", "ray"), default="local")
    parser.add_argument("--ray-address", help="an existing Ray cluster (default: RAY_ADDRESS, else a local one)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--unsandboxed",
        action="store_true",
        help="grade without the sandbox, on a machine that "
        "has none (every report says so); learner code then runs with your rights",
    )
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    policy = "off" if args.unsandboxed else "require"
    try:
        sandbox_report(policy)
    except SandboxRequired as exc:
        parser.exit(2, f"grader batch: {exc}\n")

    profile = get_profile()
    cuda = profile.device_class == "cuda"
    secret = Context.create(profile).secret  # one secret for the class: the same hidden inputs for all
    only = set(args.only.split(",")) if args.only else None
    jobs, warnings = discover(args.folder, args.out)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    ids_for = {ex: [c.id for c in checks_for(ex) if only is None or c.id in only] for ex in {j.exercise for j in jobs}}
    jobs = [j for j in jobs if ids_for[j.exercise]]
    todo = [j for j in jobs if args.force or not is_done(j, ids_for[j.exercise])]
    for job in (j for j in todo if j.unreadable):  # a zero that says what was submitted instead of a notebook
        write_report(job.report, failed_report(job, ids_for[job.exercise], job.unreadable))
    todo = [j for j in todo if not j.unreadable]
    restore = None if args.no_restore or not args.restore_from.is_dir() else str(args.restore_from.resolve())
    if restore is None and not args.no_restore:
        print(f"warning: no released notebooks in {args.restore_from}: locked cells are not restored", file=sys.stderr)
    check_timeout = args.check_timeout or float(
        os.environ.get("GRADER_CHECK_TIMEOUT") or CHECK_TIMEOUT_S[profile.device_class]
    )
    budget = args.timeout or NOTEBOOK_BUDGET_S[profile.device_class]
    gpus = cuda_slots(args.workers) if cuda else []
    workers = len(gpus) if cuda else (args.workers or default_cpu_workers())
    if cuda and not gpus:
        parser.error("CUDA profile but no GPU is visible")
    where = f"{workers} GPU slot(s) ({', '.join(gpus)})" if cuda else f"{workers} CPU worker(s)"
    engine = "Ray" if args.engine == "ray" else "local"
    print(
        f"{len(jobs)} submission(s) in {args.folder}: {len(jobs) - len(todo)} already graded, grading "
        f"{len(todo)} with {where} ({engine}), up to {check_timeout:.0f} s a check and {budget:.0f} s a submission",
        flush=True,
    )

    def make_args(job: Job) -> tuple:
        return (
            job.student,
            job.exercise,
            str(job.notebook),
            submission_bytes(job.notebook),
            ids_for[job.exercise],
            secret,
            restore,
            check_timeout,
            budget,
            os.environ.get("COURSEKIT_PROFILE"),
            os.environ.get("COURSEKIT_DEVICE"),
            policy,
        )

    bar = tqdm(total=len(todo), unit="sub", desc="grading", disable=True if args.no_progress else None)
    started = time.monotonic()
    graded = 0

    def on_done(job: Job, outcome) -> None:
        nonlocal graded
        if isinstance(outcome, NotebookError):
            outcome = failed_report(job, ids_for[job.exercise], str(outcome))
        elif isinstance(outcome, Exception):
            outcome = failed_report(
                job,
                ids_for[job.exercise],
                f"the batch grader could not grade this submission "
                f"({type(outcome).__name__}: {outcome}); run the batch again to retry it",
            )
        else:
            graded += 1
        write_report(job.report, outcome)
        bar.set_postfix_str(f"{job.student}/{job.exercise} {outcome['score']:g}/{outcome['max_score']:g}")
        bar.update(1)

    if todo:
        if args.engine == "ray":
            run_ray(todo, make_args, workers, cuda, args.ray_address, on_done)
        else:
            run_local(todo, make_args, workers, gpus, on_done)
    bar.close()
    elapsed = time.monotonic() - started
    summary, scores = write_summary(args.out, jobs)
    if jobs:
        from rich.console import Console

        Console(width=None if sys.stdout.isatty() else 160).print(score_table(jobs))
    rate = f", {60 * len(todo) / elapsed:.1f} submissions/min" if todo and elapsed > 0 else ""
    print(f"graded {graded} of {len(todo)} in {elapsed:.0f} s{rate}; wrote {summary} and {scores}")
    return 0
