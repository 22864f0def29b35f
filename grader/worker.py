"""The grading process: loads one notebook and runs checks, reporting over a pipe.

It runs in a spawned child, in a process group of its own, so a learner's
hang, crash, ``sys.exit``, fork or runaway allocation cannot take the grader
down: the parent can end the whole group.  Before any learner code runs, the
child drops secrets from its environment, caps the size of files it may
write, and snapshots the functions grading relies on (``grader.integrity``).
Results travel over a ``multiprocessing`` pipe, never stdout; the child's
stdout/stderr go to a log file whose tail is quoted if the child dies.
"""

from __future__ import annotations

import os
import re
import resource
import sys
from multiprocessing.connection import Connection

MAX_FILE_BYTES = 512 * 1024**2
SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE", re.IGNORECASE)


def _harden(log_path: str) -> None:
    os.setsid()  # a process group of its own: the grader ends everything this child starts
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key in [k for k in os.environ if SECRET_ENV.search(k)]:
        del os.environ[key]
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def serve(conn: Connection, notebook: str, exercise: str, check_ids: list[str],
          profile_name: str, device: str, seed: int, log_path: str, environ: dict[str, str] | None = None) -> None:
    """Entry point of the child: load ``notebook`` and run ``check_ids`` in order. ``environ`` is the parent's
    environment when the child was started (a fork server's children would otherwise inherit the server's)."""
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    _harden(log_path)
    from coursekit.cache import use_repo_compile_cache
    from coursekit.profile import apply_threads, get_profile
    from grader.context import Context
    from grader.integrity import snapshot, tampered
    from grader.interface import Submission
    from grader.loader import NotebookError, load_cells, read_cells
    from grader.registry import get, load_all
    from grader.results import CheckResult, run_check
    from grader.scan import scan_cells

    load_all()
    use_repo_compile_cache()
    profile = get_profile(profile_name, device)
    apply_threads(profile)
    ctx = Context.create(profile, seed)
    guarded = snapshot()

    def fail_all(ids: list[str], message: str) -> None:
        for cid in ids:
            conn.send(("done", CheckResult.failed(get(cid), message).as_dict()))

    try:
        cells = read_cells(notebook)
    except NotebookError as exc:
        fail_all(check_ids, str(exc))
        conn.send(("end", None))
        return
    flags = [f.as_dict() for f in scan_cells(cells)]
    loaded = load_cells(cells)
    conn.send(("loaded", {"problems": loaded.problems, "flags": flags}))
    submission = Submission(exercise, loaded.namespace, loaded.problems)
    for index, cid in enumerate(check_ids):
        replaced = tampered(guarded)
        if replaced:
            fail_all(check_ids[index:], f"tampering detected: your code replaced {', '.join(replaced[:5])}; "
                                        "grading cannot be trusted after that")
            break
        conn.send(("start", cid))
        result = run_check(get(cid), submission, ctx)
        replaced = tampered(guarded)
        if replaced:
            result = CheckResult.failed(get(cid), f"tampering detected during this check: your code replaced "
                                                  f"{', '.join(replaced[:5])}")
        conn.send(("done", result.as_dict()))
        if getattr(result, "unsettled", False):
            break  # torch may be broken in this process: the runner starts a fresh one for the rest
    conn.send(("end", None))
    conn.close()
