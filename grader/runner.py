"""Grade notebooks: one spawned worker per notebook, restarted after a crash or hang.

A check that hangs past its timeout, or kills its process, scores zero with a
message saying so; the worker is restarted and the remaining checks still run.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from coursekit.profile import Profile
from grader.registry import checks_for, get
from grader.results import CheckResult

LOAD_TIMEOUT_S = 120.0
EXIT_GRACE_S = 15.0
CHECK_TIMEOUT_S = {"cpu": 240.0, "cuda": 300.0}


@dataclass
class NotebookGrade:
    """All results for one notebook."""

    notebook: str
    exercise: str
    results: list[CheckResult]
    problems: list[str] = field(default_factory=list)

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
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode} (sys.exit or os._exit in your code?)"


def grade_notebook(notebook: Path, exercise: str, profile: Profile, seed: int, *,
                   check_ids: list[str] | None = None, check_timeout_s: float | None = None,
                   progress: bool = True) -> NotebookGrade:
    """Run ``exercise``'s checks (or ``check_ids``) on ``notebook`` in isolated workers."""
    pending = check_ids or [c.id for c in checks_for(exercise)]
    timeout = check_timeout_s or CHECK_TIMEOUT_S[profile.device_class]
    grade = NotebookGrade(str(notebook), exercise, [])
    done: dict[str, CheckResult] = {}
    ctx = mp.get_context("spawn")
    bar = tqdm(total=len(pending), desc=f"grading {notebook.name}", unit="check", disable=not progress, leave=False)
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        while pending:
            log = Path(tmp) / f"worker-{len(done)}.log"
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_serve, args=(child, str(notebook), exercise, list(pending),
                                                    profile.name, profile.device, seed, str(log)), daemon=True)
            proc.start()
            child.close()
            current: str | None = None
            loaded = False
            while True:
                wait = timeout if (current or loaded) else LOAD_TIMEOUT_S
                if not parent.poll(wait):
                    victims = [current] if current else list(pending)
                    what = f"took longer than {wait:.0f} s" if current else f"loading the notebook took longer than {wait:.0f} s"
                    for cid in victims:
                        done[cid] = CheckResult.failed(get(cid), f"{what}: an endless loop, a blocking call, or far too slow a solution?", wait)
                    break
                try:
                    kind, payload = parent.recv()
                except (EOFError, OSError):
                    proc.join(5)
                    victims = [current] if current else list(pending)
                    tail = _tail(log)
                    for cid in victims:
                        done[cid] = CheckResult.failed(
                            get(cid), f"the grading process {_death(proc.exitcode)} while running this check"
                            + (f"; its last output:\n{tail}" if tail else ""))
                    break
                if kind == "loaded":
                    loaded, grade.problems = True, payload
                elif kind == "start":
                    current = payload
                elif kind == "done":
                    done[payload["id"]] = CheckResult(**payload)
                    current = None
                elif kind == "end":
                    break
                pending = [c for c in pending if c not in done]
                bar.n = len(done)
                bar.refresh()
            pending = [c for c in pending if c not in done]
            proc.join(EXIT_GRACE_S if not pending else 0.1)  # let a finished worker shut down cleanly
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            parent.close()
    bar.close()
    order = check_ids or [c.id for c in checks_for(exercise)]
    grade.results = [done[cid] for cid in order]
    return grade


def _serve(*args) -> None:
    from grader.worker import serve

    serve(*args)
