"""Checks inside a notebook, for the learner's own feedback: ``run_check("<id>", globals())``.

Each check cell in an exercise calls ``run_check``. It runs the same check function the grader runs, with
the probes in the learner's own kernel (``grader.local_learner.LocalLearner``): quick feedback, never a grade.
Grades come from ``python -m grader``, ``grader batch`` and ``make autograde``, which run every check in a
judge process against a sandboxed worker (``grader.runner``); ``make autograde`` does not execute the
notebook at all, so redefining ``run_check`` (or anything else) in a cell changes no grade.

Inside a notebook:

* warnings go to stdout, never stderr;
* what the learner's code prints during the check is held back after a pass (one line says how much) and its last
  lines are shown after a failure; ``run_check(id, globals(), show_output=True)`` shows it either way;
* a check that runs past its time limit (``GRADER_CHECK_TIMEOUT`` seconds, default
  the grader's per-check timeout) stops with the same message ``python -m grader`` gives;
* the outcome is shown as text and also published as structured data
  (``application/vnd.coursekit.check+json``: points, measured vs required, the
  message, which thresholds); ``make autograde`` writes the same record into each check
  cell of the graded notebook (``describe``), which ``make feedback`` reads back;
* a failure raises ``AssertionError`` with the teaching message, from ``run_check``
  itself: the traceback shows the cell and that one line, never a hidden check's code;
* with ``GRADER_IN_NOTEBOOK=public`` a hidden check's cell says it is graded by the judge and runs nothing:
  the kit's own tests execute ``solutions/`` this way, because ``tests/test_grader.py`` grades every hidden
  check of each solution through the judge, and running them twice would only cost time.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from grader.numbers import format_value
from grader.quiet import PrintedTail, hold_stdout, stderr_to_stdout

TIMEOUT_ENV = "GRADER_CHECK_TIMEOUT"
SCOPE_ENV = "GRADER_IN_NOTEBOOK"  # "public": hidden checks' cells run nothing (see the module docstring)
RESULT_MIME = "application/vnd.coursekit.check+json"
TIMEOUT_MESSAGE = (
    "no answer from this check after {limit:.0f} s. An endless loop, a blocking call, or far too slow a solution?"
)

_CONTEXT = None


class CheckTimeout(BaseException):
    """Raised inside a check that ran out of time (not an ``Exception``, so learner code cannot swallow it)."""


def check_timeout_s(ctx) -> float:
    """Seconds one check may run: ``GRADER_CHECK_TIMEOUT``, else the grader's per-check timeout."""
    env = os.environ.get(TIMEOUT_ENV)
    if env:
        return float(env)
    from grader.runner import CHECK_TIMEOUT_S

    return CHECK_TIMEOUT_S[ctx.profile.device_class]


def where_in_kernel(frame: FrameType | None) -> str:
    """' It was in `fn`, line 3: `while ...`.' for the innermost running frame of code defined in the notebook
    (IPython's cells run from files named ``.../ipykernel_<pid>/<hash>.py`` or ``<ipython-input-...>``), or ""."""
    while frame is not None:
        file = frame.f_code.co_filename
        if "ipykernel_" in file or file.startswith(("<ipython-input-", "<code cell ")):
            text = linecache.getline(file, frame.f_lineno).strip()
            text = text if len(text) <= 80 else text[:77] + "..."
            name = frame.f_code.co_name
            where = f"`{name}`, " if name != "<module>" else ""
            return f" It was in {where}line {frame.f_lineno} of its cell" + (f": `{text}`." if text else ".")
        frame = frame.f_back
    return ""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise ``CheckTimeout`` in this (main) thread after ``seconds``; a no-op elsewhere."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum, frame):
        raise CheckTimeout(where_in_kernel(frame))

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _profile_threads(ctx) -> Iterator[None]:
    """The profile's CPU thread count while the check runs (as in ``python -m grader``), then the kernel's own."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(ctx.profile.threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def describe(result, check, ctx) -> tuple[str, dict]:
    """The text a learner sees, and the structured record ``make feedback`` reads."""
    mark = "PASS" if result.passed else "FAIL"
    lines = [f"[{mark}] {check.id} ({result.points:g}/{result.max_points}): {check.title}"]
    source = ctx.threshold_source(check.id) if check.kind == "speed" else None
    if result.measured is not None and result.required is not None:
        measured = format_value(result.measured, check.kind, result.required)
        line = f"       measured {measured}, required {format_value(result.required, check.kind, result.measured)}"
        lines.append(line + (f" (thresholds: {source})" if source else ""))
    if result.passed and result.message != "ok":
        lines.append(f"       {result.message}")
    record = {**result.as_dict(), "title": check.title, "public": check.public, "thresholds": source}
    return "\n".join(lines), record


def _publish(text: str, record: dict) -> None:
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None and getattr(shell, "kernel", None) is not None:
        from IPython.display import publish_display_data

        publish_display_data({"text/plain": text, RESULT_MIME: record})
    else:
        print(text)


SHOWN_LINES = 40  # of what the learner's code printed, after a failed check


def _show_printed(printed: PrintedTail, check_id: str, show: bool) -> None:
    """What the learner's code printed during the check: its last lines, or one line saying it was held back."""
    if not printed.lines and not printed.tail.strip():
        return
    if show:
        cut = printed.lines > SHOWN_LINES or len(printed.tail) == printed.limit
        print(f"(what your code printed during the check{f', its last {SHOWN_LINES} lines' if cut else ''}:)")
        print(printed.last_lines(SHOWN_LINES))
    else:
        print(
            f"(your code printed {max(printed.lines, 1)} line(s) during the check, held back because it passed: "
            f"run_check({check_id!r}, globals(), show_output=True) shows them)"
        )


def run_check(check_id: str, namespace: dict[str, Any], show_output: bool = False) -> None:
    """Run ``check_id`` against ``namespace``; show the outcome, raise ``AssertionError`` if it fails. What your
    code prints during the check is shown after a failure (its last lines) and held back after a pass, with a line
    saying how much; ``show_output=True`` shows it either way (blind attendees, session 45: exercise 5's passing
    check showed 80 lines of the bisector's log before its verdict)."""
    global _CONTEXT
    from grader.context import Context
    from grader.interface import exercise_for  # noqa: F401 - the registry needs the contracts
    from grader.local_learner import LocalLearner
    from grader.protocol import ProtocolError
    from grader.registry import get
    from grader.results import CheckResult
    from grader.results import run_check as _run

    try:
        check = get(check_id)
    except KeyError:
        raise LookupError(
            f"check {check_id!r} is not part of this copy of the grader: ask your instructor for the current kit"
        ) from None
    if not check.public and os.environ.get(SCOPE_ENV, "").lower() == "public":
        print(f"{check_id}: a hidden check, graded by the judge; not run here ({SCOPE_ENV}=public)")
        return
    _CONTEXT = _CONTEXT or Context.create()
    limit = check_timeout_s(_CONTEXT)
    start = time.perf_counter()
    printed = PrintedTail()
    try:
        with stderr_to_stdout(), _profile_threads(_CONTEXT), hold_stdout() as printed:
            with _time_limit(limit):
                result = _run(check, LocalLearner(namespace, check.exercise, _CONTEXT.profile), _CONTEXT)
    except CheckTimeout as exc:
        where = str(exc.args[0]) if exc.args else ""
        result = CheckResult.failed(check, TIMEOUT_MESSAGE.format(limit=limit) + where, time.perf_counter() - start)
    except KeyboardInterrupt:
        result = CheckResult.failed(
            check,
            "the check was interrupted (by you) before it finished: an endless loop or a blocking call?",
            time.perf_counter() - start,
        )
    except ProtocolError as exc:  # in the grader this zeroes the submission; here it is feedback
        from grader.judging import protocol_cause

        why = f"the grader would flag this: {exc} ({protocol_cause(str(exc))})"
        result = CheckResult.failed(check, why, time.perf_counter() - start)
    _show_printed(printed, check_id, show=show_output or not result.passed)
    text, record = describe(result, check, _CONTEXT)
    _publish(text, record)
    if not result.passed:
        raise AssertionError(result.message)
