"""Where a worker that ran out of time was stuck: for the timeout's message, and so that a later check found stuck
at the same place in the notebook for a long while is stopped early (``grader.learner``).

The worker (``grader.worker``) answers ``STACK_SIGNAL`` twice: ``faulthandler`` writes every thread's Python stack to
its log from a C signal handler, so it arrives even from a tight ``while True: pass`` or a call blocked in C; and a
Python handler chained after it writes the line of the notebook that Dynamo is tracing, if it is tracing one
(``DYNAMO_MARK``): a loop that never ends also never ends while ``torch.compile`` traces it, and the stack then
holds only Dynamo's own frames. The judge only reads text here: learner code could write a stack of its own, which
changes nothing but the words of its own timeout message and when its own check stops.
"""

from __future__ import annotations

import ast
import contextlib
import re
import time
from dataclasses import dataclass
from pathlib import Path

from grader import containment
from grader.worker import DYNAMO_MARK, STACK_SIGNAL

WAIT_S = 2.0  # how long the judge waits for the stack (a worker stopped by its own code never writes one)
AFTER_S = 0.2  # then for the Python handler's line, which runs at the interpreter's next check for signals
MAX_READ = 1024**2  # bytes of log read after the signal: the stack comes first, learner output may follow
MARK = "(most recent call first)"
# learner code may print look-alikes into the log: numbers are bounded (int() of a huge one raises) and names clipped
FRAME = re.compile(r'^\s*File "(?P<file>[^"]{0,300})", line (?P<line>\d{1,9}) in (?P<name>\S{1,80})')
TRACED = re.compile(
    rf"^{re.escape(DYNAMO_MARK)}(?P<file>[^\t]{{0,300}})\t(?P<line>\d{{1,9}})\t(?P<name>\S{{1,80}})\S*$", re.MULTILINE
)
CELL = re.compile(r"^<code cell (\d{1,9})>$")
COMPILER = ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/", "/triton/")
LOWERING = ("/torch/_inductor/", "/torch/_functorch/", "/triton/")  # past tracing: AOTAutograd, Inductor, Triton


@dataclass(frozen=True)
class Frame:
    cell: int  # 1-based, code cells only (grader.loader names them "<code cell N>")
    line: int
    name: str


@dataclass(frozen=True)
class Stuck:
    """The probe thread at the deadline: the notebook's frames innermost first; whether torch's compiler ran inside
    the innermost of them (or before any was entered); the notebook line Dynamo was tracing, if any; and whether
    the compile had got past tracing (AOTAutograd, Inductor or Triton at work)."""

    frames: tuple[Frame, ...]
    compiling: bool
    traced: Frame | None = None
    lowering: bool = False


def stack_of(pid: int, log: Path, wait_s: float = WAIT_S) -> str:
    """Ask the worker ``pid`` for its threads' stacks and return what it appended to ``log`` ("" if none came)."""
    try:
        start = log.stat().st_size
    except OSError:
        return ""
    if not containment.signal_worker(pid, STACK_SIGNAL):  # gone: its number may name another process by now
        return ""

    def read() -> str:
        with contextlib.suppress(OSError), log.open("rb") as f:
            f.seek(start)
            return f.read(MAX_READ).decode(errors="replace")
        return ""

    until, seen, text = time.monotonic() + wait_s, None, ""
    while time.monotonic() < until:
        time.sleep(0.05)
        text = read()
        if MARK in text:
            if seen == len(text):  # nothing more written for one poll: the dump is complete
                time.sleep(AFTER_S)
                return read()
            seen = len(text)
    return text if MARK in text else ""


def parse(text: str) -> Stuck | None:
    """The stack of the thread that runs the probe (the one with ``grader/probing.py`` in it), else of the first
    thread with a notebook frame, with what Dynamo was tracing; None if no thread shows either."""
    blocks, current = [], []
    for line in text.splitlines():
        if MARK in line:
            current = []
            blocks.append(current)
        elif (m := FRAME.match(line)) and blocks:
            current.append((m["file"], int(m["line"]), m["name"]))
    probing = [b for b in blocks if any(f.endswith("/grader/probing.py") for f, _, _ in b)]
    notebook = [b for b in blocks if any(CELL.match(f) for f, _, _ in b)]
    chosen = (probing or notebook or [None])[0]
    if chosen is None:
        return None
    frames, compiling = [], False
    for file, line, name in chosen:  # innermost first
        if m := CELL.match(file):
            frames.append(Frame(int(m[1]), line, name))
        elif not frames and any(part in file for part in COMPILER):
            compiling = True
    traced = None
    if (t := list(TRACED.finditer(text))) and (cell := CELL.match(t[-1]["file"])):
        traced = Frame(int(cell[1]), int(t[-1]["line"]), t[-1]["name"])
    lowering = any(part in file for file, _, _ in chosen for part in LOWERING)
    return Stuck(tuple(frames), compiling, traced, lowering)


def place(stuck: Stuck | None, cells: list[str]) -> tuple[int, int] | None:
    """Where it was, to compare with a later look: ``(code cell, line)``, the line being the first of the innermost
    loop around it (a loop's lines take turns), whether the code ran there or Dynamo was tracing it (an endless loop
    hangs both). None where it tells nothing: no notebook line, or torch.compile was compiling inside it (a graph's
    compile can take a while on one line)."""
    if stuck is None:
        return None
    if stuck.frames and not stuck.compiling:
        f = stuck.frames[0]
    elif stuck.traced is not None and not stuck.lowering:
        f = stuck.traced
    else:
        return None
    return f.cell, _enclosing_loop(_source(cells, f.cell), f.line, inclusive=True) or f.line


def _source(cells: list[str], cell: int) -> str:
    """The cell's text as the worker ran it (``grader.loader`` rewrites magics, line for line)."""
    from grader.loader import BoundedTransformer

    raw = cells[cell - 1] if 0 < cell <= len(cells) else ""
    try:
        return BoundedTransformer().transform_cell(raw)
    except Exception:  # noqa: BLE001 - the worker skipped such a cell; its raw text still has the line
        return raw


def describe(stuck: Stuck | None, cells: list[str]) -> str:
    """' It was in `fn`, the 5th code cell, line 3: `while ...`.' for the innermost notebook frame, or the line
    torch.compile was tracing, or that it was compiling; "" when the stack told nothing."""
    if stuck is None:
        return ""
    if stuck.frames and not stuck.compiling:
        return f" It was in {_at(stuck.frames[0], cells)}."
    if stuck.traced is not None:
        return (
            f" torch.compile was tracing {_at(stuck.traced, cells)} (Dynamo runs a loop's body once for each turn "
            "while it traces: an endless loop never ends there either)."
        )
    if stuck.frames:
        return f" It was in {_at(stuck.frames[0], cells)}, inside torch.compile, compiling it."
    return " It was inside torch.compile, compiling your code." if stuck.compiling else ""


def _at(f: Frame, cells: list[str]) -> str:
    """'`fn`, the 5th code cell, line 3: `x = ...`, in the loop on line 2: `while ...`'."""
    from grader.probing import ordinal

    source = _source(cells, f.cell)
    lines = source.splitlines()
    name = f"`{f.name}`, " if f.name != "<module>" else ""
    where = f"{name}the {ordinal(f.cell)} code cell, line {f.line}" + _quoted(lines, f.line)
    if (loop := _enclosing_loop(source, f.line)) is not None:
        where += f", in the loop on line {loop}" + _quoted(lines, loop)
    return where


def _quoted(lines: list[str], line: int) -> str:
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    text = text if len(text) <= 80 else text[:77] + "..."
    return f": `{text}`" if text else ""


def _enclosing_loop(source: str, line: int, inclusive: bool = False) -> int | None:
    """The first line of the innermost ``while`` or ``for`` loop whose body holds ``line`` (or, ``inclusive``, that
    starts on it), or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    loops = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.While | ast.For | ast.AsyncFor)
        and (n.lineno <= line if inclusive else n.lineno < line)
        and line <= (n.end_lineno or n.lineno)
    ]
    return max(loops) if loops else None
