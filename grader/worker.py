"""The grading process: loads one notebook and runs checks, reporting over a pipe.

It runs in a spawned child so a learner's hang, crash or ``sys.exit`` cannot
take the grader down; results travel over a ``multiprocessing`` pipe, never
stdout, and the child's own stdout/stderr go to a log file whose tail is
quoted if the child dies.
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def serve(conn: Connection, notebook: str, exercise: str, check_ids: list[str],
          profile_name: str, device: str, seed: int, log_path: str) -> None:
    """Entry point of the child: load ``notebook`` and run ``check_ids`` in order."""
    _redirect_output(log_path)
    from coursekit.cache import use_repo_compile_cache
    from coursekit.profile import apply_threads, get_profile
    from grader.context import Context
    from grader.interface import Submission
    from grader.loader import NotebookError, load_notebook
    from grader.registry import get
    from grader.results import CheckResult, run_check

    use_repo_compile_cache()
    profile = get_profile(profile_name, device)
    apply_threads(profile)
    ctx = Context.create(profile, seed)
    try:
        loaded = load_notebook(notebook)
    except NotebookError as exc:
        for cid in check_ids:
            conn.send(("done", CheckResult.failed(get(cid), str(exc)).as_dict()))
        conn.send(("end", None))
        return
    submission = Submission(exercise, loaded.namespace, loaded.problems)
    conn.send(("loaded", loaded.problems))
    for cid in check_ids:
        conn.send(("start", cid))
        conn.send(("done", run_check(get(cid), submission, ctx).as_dict()))
    conn.send(("end", None))
    conn.close()
