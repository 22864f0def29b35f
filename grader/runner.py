"""Grade notebooks: one spawned worker per notebook, restarted after a crash, hang or memory blow-up.

A check that hangs past its timeout, kills its process or allocates past the
memory limit scores zero with a message saying so; the worker's whole process
group is ended, a new worker starts, and the remaining checks still run.  The
parent also holds each notebook to a total time budget and checks the time a
speed check reports against its own clock.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from tqdm.auto import tqdm

from coursekit.profile import Profile
from grader.registry import checks_for, get
from grader.results import CheckResult

START_METHOD_ENV = "GRADER_START_METHOD"  # "forkserver" (default where available) or "spawn"
PRELOAD = ["grader.preload"]  # what the fork server imports once, so each worker starts without importing torch
LOAD_TIMEOUT_S = 120.0
EXIT_GRACE_S = 15.0
POLL_S = 0.25
CHECK_TIMEOUT_S = {"cpu": 240.0, "cuda": 300.0}
NOTEBOOK_BUDGET_S = {"cpu": 1200.0, "cuda": 1800.0}


def default_memory_limit() -> int:
    """Bytes a worker (with its children) may hold: 60% of this machine's memory, at most 32 GiB."""
    return int(min(0.6 * psutil.virtual_memory().total, 32 * 1024**3))


@dataclass
class NotebookGrade:
    """All results for one notebook, with load problems and scan flags."""

    notebook: str
    exercise: str
    results: list[CheckResult]
    problems: list[str] = field(default_factory=list)
    flags: list[dict] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(r.points for r in self.results)

    @property
    def max_score(self) -> int:
        return sum(r.max_points for r in self.results)


def _tail(log: Path, chars: int = 600) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text[-chars:].strip()


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode} (sys.exit or os._exit in your code?)"


def _tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def _end_group(proc: mp.Process) -> None:
    """Kill the worker and everything it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, TypeError):
        pass
    if proc.is_alive():
        proc.kill()
    proc.join(5)


def worker_context() -> mp.context.BaseContext:
    """How grading processes start: forked from a server that imported torch, timm and the checks once
    (``forkserver``, about 4 s less per worker), or from scratch (``spawn``, ``GRADER_START_METHOD=spawn``).
    Neither shares state with this process: the server imports modules and runs nothing else."""
    method = os.environ.get(START_METHOD_ENV) or ("forkserver" if "forkserver" in mp.get_all_start_methods()
                                                   else "spawn")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _apply_flags(results: dict[str, CheckResult], flags: list[dict]) -> None:
    """A tamper flag from the static scan withholds speed points until an instructor reviews."""
    tamper = [f for f in flags if f["kind"] == "tamper"]
    if not tamper:
        return
    why = "; ".join(f"code cell {f['cell']}, line {f['line']}: {f['message']}" for f in tamper[:3])
    for r in results.values():
        if r.kind == "speed" and r.passed:
            r.passed, r.points = False, 0
            r.message = f"flagged for review ({why}); speed points are withheld until an instructor reviews"


def grade_notebook(notebook: Path, exercise: str, profile: Profile, seed: int, *,
                   check_ids: list[str] | None = None, check_timeout_s: float | None = None,
                   memory_limit_bytes: int | None = None, budget_s: float | None = None,
                   progress: bool = True) -> NotebookGrade:
    """Run ``exercise``'s checks (or ``check_ids``) on ``notebook`` in isolated workers."""
    order = check_ids or [c.id for c in checks_for(exercise)]
    pending = list(order)
    timeout = check_timeout_s or CHECK_TIMEOUT_S[profile.device_class]
    memory_limit = memory_limit_bytes or default_memory_limit()
    deadline = time.monotonic() + (budget_s or NOTEBOOK_BUDGET_S[profile.device_class])
    grade = NotebookGrade(str(notebook), exercise, [])
    done: dict[str, CheckResult] = {}
    ctx = worker_context()
    bar = tqdm(total=len(pending), desc=f"grading {notebook.name}", unit="check", disable=not progress, leave=False)
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        while pending:
            if time.monotonic() >= deadline:
                for cid in pending:
                    done[cid] = CheckResult.failed(get(cid), "the notebook's total grading time budget ran out "
                                                             "before this check could run")
                break
            log = Path(tmp) / f"worker-{len(done)}.log"
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_serve, args=(child, str(notebook), exercise, list(pending),
                                                    profile.name, profile.device, seed, str(log), dict(os.environ)),
                               daemon=True)
            proc.start()
            child.close()
            current: str | None = None
            started = time.monotonic()
            loaded = False

            def fail(message: str, seconds: float = 0.0) -> None:
                for cid in ([current] if current else list(pending)):
                    done[cid] = CheckResult.failed(get(cid), message, seconds)

            while True:
                limit = timeout if (current or loaded) else LOAD_TIMEOUT_S
                waited = time.monotonic() - started
                if waited > limit or time.monotonic() > deadline:
                    what = "this check" if current else "loading the notebook"
                    fail(f"{what} took longer than {min(limit, waited):.0f} s: an endless loop, a blocking call, "
                         "or far too slow a solution?", waited)
                    break
                if _tree_rss(proc.pid) > memory_limit:
                    fail(f"the grading process used more than {memory_limit / 1024**3:.1f} GiB of memory and was "
                         "stopped: a huge allocation, or tensors kept alive in a list?")
                    break
                if not parent.poll(POLL_S):
                    continue
                try:
                    kind, payload = parent.recv()
                except (EOFError, OSError):
                    proc.join(5)
                    tail = _tail(log)
                    what = "while running this check" if current else "while loading the notebook"
                    fail(f"the grading process {_death(proc.exitcode)} {what}"
                         + (f"; its last output:\n{tail}" if tail else ""))
                    break
                if kind == "loaded":
                    loaded = True
                    grade.problems, grade.flags = payload["problems"], payload["flags"]
                    started = time.monotonic()
                elif kind == "start":
                    current, started = payload, time.monotonic()
                elif kind == "done":
                    result = CheckResult(**payload)
                    elapsed = time.monotonic() - started
                    if result.timed_s is not None and result.timed_s > 1.05 * elapsed + 0.1:
                        result = CheckResult.failed(get(result.id), f"the check reported {result.timed_s:.1f} s of "
                                                    f"timing inside {elapsed:.1f} s of wall time: a patched clock?")
                    done[result.id] = result
                    current, started = None, time.monotonic()
                elif kind == "end":
                    break
                pending = [c for c in pending if c not in done]
                bar.n = len(done)
                bar.refresh()
            pending = [c for c in pending if c not in done]
            proc.join(EXIT_GRACE_S if not pending else 0.1)  # let a finished worker shut down cleanly
            _end_group(proc)
            parent.close()
    bar.close()
    _apply_flags(done, grade.flags)
    grade.results = [done[cid] for cid in order]
    return grade


def _serve(*args) -> None:
    from grader.worker import serve

    serve(*args)
