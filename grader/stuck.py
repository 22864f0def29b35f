"""Where a worker that ran out of time was stuck: for the timeout's message, and so that a later check found
running the same line of the notebook for a long while is stopped early (``grader.learner``).

The worker registers ``faulthandler`` on ``STACK_SIGNAL`` (``grader.worker``). Before the judge ends a worker that
has not answered in time, it sends that signal and reads the Python stack the worker wrote to its log: faulthandler
writes it from a C signal handler, so it arrives even from a tight ``while True: pass`` or a call blocked in C.
The judge only reads text here: learner code could write a stack of its own, which changes nothing but the words
of its own timeout message.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from grader.worker import STACK_SIGNAL

WAIT_S = 2.0  # how long the judge waits for the stack (a worker stopped by its own code never writes one)
MAX_READ = 1024**2  # bytes of log read after the signal: the stack comes first, learner output may follow
MARK = "(most recent call first)"
FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<name>\S+)')
CELL = re.compile(r"^<code cell (\d+)>$")
COMPILER = ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/", "/triton/")


@dataclass(frozen=True)
class Frame:
    cell: int  # 1-based, code cells only (grader.loader names them "<code cell N>")
    line: int
    name: str


@dataclass(frozen=True)
class Stuck:
    """The probe thread's stack at the deadline: the notebook's frames innermost first, and whether torch's
    compiler was running inside the innermost of them (or before any was entered)."""

    frames: tuple[Frame, ...]
    compiling: bool


def stack_of(pid: int, log: Path, wait_s: float = WAIT_S) -> str:
    """Ask the worker ``pid`` for its threads' stacks and return what it appended to ``log`` ("" if none came)."""
    try:
        start = log.stat().st_size
        os.kill(pid, STACK_SIGNAL)
    except OSError:
        return ""
    until, seen, text = time.monotonic() + wait_s, None, ""
    while time.monotonic() < until:
        time.sleep(0.05)
        with contextlib.suppress(OSError), log.open("rb") as f:
            f.seek(start)
            text = f.read(MAX_READ).decode(errors="replace")
            if MARK in text:
                if seen == len(text):  # nothing more written for one poll: the dump is complete
                    return text
                seen = len(text)
    return text if MARK in text else ""


def parse(text: str) -> Stuck | None:
    """The stack of the thread that runs the probe (the one with ``grader/probing.py`` in it), else of the first
    thread with a notebook frame; None if no thread shows either."""
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
    return Stuck(tuple(frames), compiling)


def place(stuck: Stuck | None) -> tuple[int, int] | None:
    """(code cell, line) of the innermost notebook frame, or None: no notebook frame, or torch.compile was working
    inside it (a compile can take a while on one line)."""
    if stuck is None or not stuck.frames or stuck.compiling:
        return None
    return stuck.frames[0].cell, stuck.frames[0].line


def _source(cells: list[str], cell: int) -> str:
    """The cell's text as the worker ran it (``grader.loader`` rewrites magics, line for line)."""
    from grader.loader import BoundedTransformer

    raw = cells[cell - 1] if 0 < cell <= len(cells) else ""
    try:
        return BoundedTransformer().transform_cell(raw)
    except Exception:  # noqa: BLE001 - the worker skipped such a cell; its raw text still has the line
        return raw


def describe(stuck: Stuck | None, cells: list[str]) -> str:
    """' It was in `fn`, the 5th code cell, line 3: `while ...`.' for the innermost notebook frame, or where
    torch.compile was; "" when the stack told nothing."""
    from grader.probing import ordinal

    if stuck is None:
        return ""
    if not stuck.frames:
        return " It was inside torch.compile, compiling your code." if stuck.compiling else ""
    f = stuck.frames[0]
    source = _source(cells, f.cell)
    lines = source.splitlines()
    name = f"`{f.name}`, " if f.name != "<module>" else ""
    where = f" It was in {name}the {ordinal(f.cell)} code cell, line {f.line}" + _quoted(lines, f.line)
    if (loop := _enclosing_loop(source, f.line)) is not None:
        where += f", in the loop on line {loop}" + _quoted(lines, loop)
    return where + (", inside torch.compile, compiling it." if stuck.compiling else ".")


def _quoted(lines: list[str], line: int) -> str:
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    text = text if len(text) <= 80 else text[:77] + "..."
    return f": `{text}`" if text else ""


def _enclosing_loop(source: str, line: int) -> int | None:
    """The first line of the innermost ``while`` or ``for`` loop whose body holds ``line``, or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    loops = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.While | ast.For | ast.AsyncFor) and n.lineno < line <= (n.end_lineno or n.lineno)
    ]
    return max(loops) if loops else None
