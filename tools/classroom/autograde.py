"""``autograde``: nbgrader autograde, graded by the isolated runner, in shares of the class."""

from __future__ import annotations

import hashlib
import json
import queue
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tools.classroom.course import assignments, ensure_course, gradebook, nbgrader
from tools.classroom.learners import REFUSED_FILE, autograded_notebook, id_problem, refused_note, refused_submissions
from tools.classroom.records import graded_scores


def autograde(course: Path, which: list[str] | None, jobs: int, force: bool, unsandboxed: bool = False) -> None:
    """nbgrader autograde, graded by the isolated runner: hidden checks put back, locked cells restored, each
    check's verdict into the gradebook. Without the sandbox it refuses, unless ``unsandboxed``."""
    from grader import cgroups
    from grader.batch import write_report
    from grader.nbgrader_hooks import UNSANDBOXED_ENV
    from grader.runner import SandboxRequired, sandbox_report

    try:
        report = sandbox_report("off" if unsandboxed else "require")
    except SandboxRequired as exc:
        raise SystemExit(f"autograde: {exc}") from None
    print(f"learner code: {report.describe()}; {cgroups.describe()}", flush=True)
    ensure_course(course)
    env = {UNSANDBOXED_ENV: "1"} if unsandboxed else {}
    jobs, gpus = gpu_jobs(jobs)
    where = f", one GPU each ({', '.join(gpus)})" if gpus and jobs > 1 else ""
    slots: queue.SimpleQueue[dict[str, str]] = queue.SimpleQueue()
    for slot in share_slots(jobs, gpus):  # one for each of the pool's threads: no two processes share a GPU
        slots.put(slot)
    failed: list[str] = []
    refused: list[str] = []
    ledger = GradedLedger(course)
    refusals = refused_submissions(course)

    def run(assignment: str, group: list[str], students: list[str], extra: list[str]) -> None:
        """nbgrader autograde for ``group`` of the submitted ``students``, in ``jobs`` processes at most."""
        if jobs <= 1:
            for share in shares(group, 1):  # the whole group in one process, unless an id holds a comma
                try:
                    nbgrader(course, "autograde", assignment, *extra, *share_options(share, students), env=env)
                except SystemExit as exc:  # a submission nbgrader could not process: the others still grade
                    failed.append(f"{assignment}: {exc}")
            return

        def grade_share(selection: list[str]) -> None:
            slot = slots.get()
            try:
                nbgrader(course, "autograde", assignment, *extra, *selection, env={**env, **slot})
            finally:
                slots.put(slot)

        with gradebook(course):  # the course's row, made once: parallel nbgrader processes would race to insert it
            pass
        with ThreadPoolExecutor(jobs) as pool:
            selections = [share_options(share, students) for share in shares(group, jobs)]
            for outcome in [pool.submit(grade_share, selection) for selection in selections]:
                try:
                    outcome.result()
                except SystemExit as exc:
                    failed.append(f"{assignment}: {exc}")

    for assignment in which or assignments(course):
        students = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}") if p.is_dir())
        digests, unreadable = read_submissions(course, assignment, students)
        refused += [
            f"{assignment}  {student}: {refused_note(course, assignment, student, why)}"
            for student, why in unreadable.items()
        ]
        refusals[assignment] = unreadable
        write_report(course / REFUSED_FILE, refusals)
        if unreadable:  # in the gradebook, so that nbgrader's export lists them
            with gradebook(course) as gb:
                for student in unreadable:
                    gb.update_or_create_student(student)
        gradable = [s for s in students if s not in unreadable]
        if not gradable:
            continue
        print(f"autograding {assignment}: {len(gradable)} submission(s), {jobs} at a time{where}", flush=True)
        graded_before = {s for s in gradable if autograded_notebook(course, s, assignment)}
        # handed in again since it was graded (nbgrader would skip it as graded): regraded, whatever FORCE says
        again = [s for s in gradable if ledger.get(assignment, s) not in (None, digests[s])]
        if again and not force:
            print(f"  handed in again since graded, so graded again: {', '.join(again)}", flush=True)
        # a folder and no graded notebook: a grading that failed half way, which nbgrader would skip as graded
        half = [s for s in gradable if s not in graded_before and (course / "autograded" / s / assignment).is_dir()]
        if half and not force:
            print(f"  left half graded by an earlier run, so graded again: {', '.join(half)}", flush=True)
        forced = gradable if force else [s for s in gradable if s in again or s in half]
        for group, extra in ((forced, ["--force"]), ([s for s in gradable if s not in forced], [])):
            if group:
                run(assignment, group, students, extra)
        unknown = [s for s in graded_before if s not in forced and ledger.get(assignment, s) is None]
        if unknown:  # graded before this course kept a record: taken as graded as they are now
            print(
                f"  graded before autograde kept a record of what it graded: {', '.join(sorted(unknown))}; if any "
                "was handed in again since, `make autograde FORCE=1` once",
                flush=True,
            )
        for student in gradable:  # recorded only where nbgrader wrote the graded notebook
            if autograded_notebook(course, student, assignment) and (
                student in forced or student not in graded_before or student in unknown
            ):
                ledger.set(assignment, student, digests[student])
        ledger.save()
    graded = which or assignments(course)
    print("\n".join(["points in the gradebook:", *autograde_summary(course, graded)]), flush=True)
    if refused:
        print(
            "\n".join(
                [
                    "not autograded (no notebook nbgrader may read; `make export` lists them, and `make feedback`"
                    " tells their learners):",
                    *refused,
                ]
            )
            + "\n",
            file=sys.stderr,
            flush=True,
        )
    if failed:
        raise SystemExit(
            "autograde: nbgrader reported errors (nbgrader's log above names each student; the others were graded, "
            "and `make autograde` again retries what is missing):\n  " + "\n  ".join(failed)
        )


def read_submissions(course: Path, assignment: str, students: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``({student: sha256 of the submission's notebooks}, {student: why})``, the second for submissions nbgrader
    must not open: a notebook in ``submitted/<student>/<assignment>/`` that is no regular file, is over the size
    limit or holds too many JSON values to parse (nbgrader reads every notebook whole before the grader sees it), or
    a student or assignment folder that is a symbolic link. ``make collect`` checks what it copies; nbgrader's own
    exchange copies whatever was handed in."""
    from grader.loader import NotebookError, check_size, submission_bytes

    digests, unreadable = {}, {}
    for student in students:
        folder = course / "submitted" / student / assignment
        if problem := id_problem(student):
            unreadable[student] = problem
            continue
        if folder.parent.is_symlink() or folder.is_symlink():
            unreadable[student] = f"{folder.relative_to(course)} is a symbolic link, not a submission"
            continue
        digest = hashlib.sha256()
        for notebook in sorted(folder.glob("*.ipynb")):
            try:
                content = submission_bytes(notebook)
                check_size(content, notebook.name)
            except NotebookError as exc:
                unreadable[student] = str(exc)
                break
            digest.update(f"{notebook.name}\0{len(content)}\0".encode() + content)
        else:
            digests[student] = digest.hexdigest()
    return digests, unreadable


class GradedLedger:
    """What each submission held when it was autograded (``.tcip-autograded.json`` in the course folder), so a
    notebook handed in again after grading is graded again: nbgrader itself skips any submission it graded before."""

    def __init__(self, course: Path) -> None:
        self.path = course / ".tcip-autograded.json"
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        self.data: dict[str, dict[str, str]] = data if isinstance(data, dict) else {}

    def get(self, assignment: str, student: str) -> str | None:
        found = self.data.get(assignment, {})
        return found.get(student) if isinstance(found, dict) else None

    def set(self, assignment: str, student: str, digest: str) -> None:
        if not isinstance(self.data.get(assignment), dict):
            self.data[assignment] = {}
        self.data[assignment][student] = digest

    def save(self) -> None:
        from grader.batch import write_report  # atomic: a stopped autograde never leaves half a record

        write_report(self.path, self.data)


def not_graded_yet(course: Path, which: list[str] | None = None) -> dict[str, dict[str, str]]:
    """``{assignment: {student: why}}`` for collected submissions whose current notebooks no grade in the gradebook
    comes from: never autograded, or handed in again since (the earlier grade stands until ``make autograde``).
    Those autograde refused are listed by ``refused_submissions``, not here."""
    ledger, refused = GradedLedger(course), refused_submissions(course)
    waiting: dict[str, dict[str, str]] = {}
    for folder in sorted((course / "submitted").glob("*/*")):
        student, assignment = folder.parent.name, folder.name
        if not folder.is_dir() or (which and assignment not in which) or student in refused.get(assignment, {}):
            continue
        digests, _ = read_submissions(course, assignment, [student])
        if student not in digests or not any(folder.glob("*.ipynb")):
            continue
        graded = ledger.get(assignment, student)
        if not autograded_notebook(course, student, assignment):
            waiting.setdefault(assignment, {})[student] = "collected, not autograded yet: it is in no grade"
        elif graded is not None and graded != digests[student]:
            waiting.setdefault(assignment, {})[student] = (
                "handed in again since it was autograded: the earlier submission's grade stands until make autograde"
            )
    return waiting


def gpu_jobs(jobs: int, gpus: list[str] | None = None) -> tuple[int, list[str]]:
    """How many nbgrader processes to run at once, and on CUDA the GPUs they take. Grading on CUDA, each process
    gets a GPU of its own, as a ``grader batch`` slot does: on a shared one, a submission that held the GPU's
    memory would fail a classmate's checks with out-of-memory errors, and two honest full-size gradings may not
    fit beside each other. So ``jobs`` is cut to the GPUs visible (``CUDA_VISIBLE_DEVICES`` respected), with a
    printed reason; on CPU ``gpus`` is empty and ``jobs`` stands."""
    if gpus is None:
        from coursekit.profile import get_profile
        from grader.batch import cuda_slots

        gpus = cuda_slots(None) if get_profile().device_class == "cuda" else []
    if gpus and jobs > len(gpus):
        print(
            f"autograde: {jobs} jobs asked, but on CUDA each takes a GPU of its own and {len(gpus)} "
            f"{'is' if len(gpus) == 1 else 'are'} visible: grading {len(gpus)} at a time",
            flush=True,
        )
        jobs = len(gpus)
    return jobs, gpus[:jobs] if gpus else []


def share_slots(count: int, gpus: list[str]) -> list[dict[str, str]]:
    """The environment each of ``count`` nbgrader processes adds: its own GPU on CUDA, nothing on CPU."""
    return [{"CUDA_VISIBLE_DEVICES": gpus[i]} if gpus else {} for i in range(count)]


def shares(students: list[str], jobs: int) -> list[list[str]]:
    """``students`` dealt round-robin to ``jobs`` nbgrader processes, each grading its share one after another: a
    process pays for starting Python, torch and the grader's fork server once (about 15 s of CPU on 2 cores), not once
    per learner. With a comma in a student id (nbgrader's list separator), one process per student, as before."""
    if any("," in s for s in students):
        return [[s] for s in students]
    return [share for share in (students[i::jobs] for i in range(jobs)) if share]


def share_options(share: list[str], students: list[str]) -> list[str]:
    """nbgrader's options that select ``share`` of the submitted ``students``."""
    if len(share) == 1:
        return [f"--student={share[0]}"]
    others = sorted(set(students) - set(share))
    return [f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else []


def autograde_summary(course: Path, graded: list[str]) -> list[str]:
    """One line per learner and assignment of ``graded``: points from the gradebook, and how many checks failed."""
    totals: dict[tuple[str, str], list[float]] = {}
    for row in graded_scores(course):
        if row["assignment"] in graded:
            total = totals.setdefault((row["assignment"], row["student"]), [0.0, 0.0, 0])
            total[0] += float(row["points"] or 0)
            total[1] += float(row["max_points"] or 0)
            total[2] += row["passed"] is False
    width = max((len(student) for _, student in totals), default=0)
    return [
        f"  {assignment}  {student:{width}s}  {got:g} / {most:g} points"
        + (f", {failed:g} check(s) failed" if failed else "")
        for (assignment, student), (got, most, failed) in sorted(totals.items())
    ] or ["  nothing graded yet"]
