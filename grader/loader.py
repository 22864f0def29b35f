"""Load a notebook's definitions into a fresh module, skipping its demo cells.

Only top-level imports, ``def``/``class`` statements and UPPER_CASE constant
assignments run; calls, loops, plots, timing and training cells do not.  Each
statement runs on its own, so one broken cell costs only the names it defines.
"""

from __future__ import annotations

import ast
import errno
import json
import linecache
import os
import stat
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from IPython.core.inputtransformer2 import TransformerManager

MAX_NOTEBOOK_BYTES = 200 * 1024**2
# lists, objects and strings a notebook's JSON may hold (counted from its commas and brackets, strings' included): a
# lesson notebook with its outputs holds about 13,000; every one is a Python object once parsed, so a file of tiny
# ones (``[[],[],...]``) costs 24 times its size in memory, 48 times through nbformat
MAX_JSON_VALUES = 1_000_000
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


# IPython rewrites %magics, !shell commands and ?help lines one at a time, reading the whole cell again each time (at
# most 500 times a cell): a 78 KB notebook of such lines kept the judge busy for minutes, and 501 of them in one
# cell raised an error that ended the grading (red team, session 30). What a notebook's rewriting may cost, in
# characters read over all passes: a lesson notebook costs about 20,000; this is about 2 s on a 2-core CI box.
MAX_REWRITE_WORK = 500_000


class NotebookError(Exception):
    """The file is missing or is not a readable notebook."""


class CellRewriteError(ValueError):
    """IPython could not rewrite a cell's magics and shell lines into Python, or the notebook's rewriting ran over
    its budget (``MAX_REWRITE_WORK``); the cell is neither loaded nor scanned."""


class BoundedTransformer(TransformerManager):
    """IPython's ``TransformerManager`` with a work budget for one notebook (``MAX_REWRITE_WORK``); its
    ``transform_cell`` raises ``CellRewriteError`` for a cell it cannot rewrite or that would overspend."""

    def __init__(self, budget: int | None = None) -> None:
        super().__init__()
        self.left = MAX_REWRITE_WORK if budget is None else budget

    def do_one_token_transform(self, lines: list[str]) -> tuple[bool, list[str]]:
        self.left -= sum(map(len, lines))
        if self.left < 0:
            raise CellRewriteError(
                "its %magic, !shell and ?help lines would take IPython too long to rewrite into Python (the "
                "notebook's rewriting stopped past its budget): keep such lines few, in small cells"
            )
        return super().do_one_token_transform(lines)

    def transform_cell(self, cell: str) -> str:
        try:
            return super().transform_cell(cell)
        except CellRewriteError:
            raise
        except Exception as exc:  # noqa: BLE001 - IPython's own limit (500 rewrites a cell), or whatever it raises
            raise CellRewriteError(f"IPython could not rewrite its %magic and !shell lines ({exc})") from None


@dataclass
class Loaded:
    """The module built from a notebook, and what went wrong on the way."""

    namespace: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    cells: int = 0


def submission_bytes(path: str | Path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a submitted notebook, or ``NotebookError``: only a regular file is read, never what a symbolic link
    points to (another learner's work, a solution), nor a folder, pipe or device (a read that never ends), and no
    more than ``limit`` bytes."""
    path = Path(path)
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise NotebookError(f"notebook not found: {path}") from None
    except OSError as exc:
        raise NotebookError(f"{path.name} could not be read ({exc.strerror})") from None
    if stat.S_ISLNK(before.st_mode):
        raise NotebookError(f"{path.name} is a symbolic link, not a notebook: submit the notebook file itself")
    if stat.S_ISDIR(before.st_mode):
        raise NotebookError(f"{path.name} is a folder, not a notebook: submit the notebook file itself")
    if not stat.S_ISREG(before.st_mode):
        raise NotebookError(f"{path.name} is not a regular file (a pipe, socket or device): submit the notebook")
    too_big = NotebookError(
        f"{path.name} is {before.st_size / 1024**2:.0f} MiB, over the {limit / 1024**2:.0f} MiB limit: clear its "
        "outputs and submit again"
    )
    if before.st_size > limit:
        raise too_big
    try:  # the file may have been swapped since lstat: no link followed, no pipe waited on, the same file or nothing
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        why = "it was replaced by a link while being read" if exc.errno == errno.ELOOP else exc.strerror
        raise NotebookError(f"{path.name} could not be read ({why})") from None
    with os.fdopen(fd, "rb") as fh:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(now.st_mode):
            raise NotebookError(f"{path.name} changed while it was being read: submit it again")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise too_big
    return data


def read_cells(path: str | Path) -> list[str]:
    """Source of every code cell, or ``NotebookError`` with a clear reason."""
    path = Path(path)
    return cells_of(submission_bytes(path), path.name)


def check_size(data: bytes, name: str) -> None:
    """``NotebookError`` for notebook JSON that would take far more memory to parse than a notebook does: a limit on
    how many values it holds (``MAX_JSON_VALUES``), counted from its commas and brackets before parsing."""
    values = data.count(b",") + data.count(b"[") + data.count(b"{")
    if values > MAX_JSON_VALUES:
        raise NotebookError(
            f"{name} holds over {values:,} JSON values (lists, objects, strings), where a notebook with its outputs "
            f"holds thousands; over {MAX_JSON_VALUES:,}, it is not read. Clear its outputs and metadata and submit "
            "again"
        )


def nbgrader_metadata(cell) -> dict:
    """The cell's nbgrader metadata; ``{}`` where it is missing or not a mapping (nbformat allows any value)."""
    meta = cell.get("metadata")
    found = meta.get("nbgrader") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def notebook_json(data: bytes, name: str) -> dict:
    """The notebook JSON ``data`` (from the file ``name``) parsed, within the size limits, or ``NotebookError``."""
    check_size(data, name)
    try:
        nb = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise NotebookError(f"{name} is not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"{name} is not valid notebook JSON (line {exc.lineno}: {exc.msg}); was it truncated or edited by hand?"
        ) from None
    except RecursionError:  # valid JSON nested deeper than Python's parser recurses: no editor writes that
        raise NotebookError(
            f"{name} nests its JSON deeper than a notebook ever does (lists or objects inside each other "
            "thousands of levels deep): it is not a Jupyter notebook as Jupyter writes it"
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{name} has no 'cells' list: it is not a Jupyter notebook")
    if nb.get("nbformat") != 4 or "worksheets" in nb:  # nbformat (Jupyter, nbgrader) reads format 3's worksheets
        raise NotebookError(
            f"{name} is not in notebook format 4 (it says nbformat {str(nb.get('nbformat'))[:20]!r}"
            + (" and has format 3's 'worksheets'" if "worksheets" in nb else "")
            + "): Jupyter and the grader would read different cells from it. Open it in JupyterLab and save it, "
            "which writes format 4"
        )
    return nb


def cells_of(data: bytes, name: str) -> list[str]:
    """Source of every code cell of the notebook JSON ``data`` (from the file ``name``), or ``NotebookError``."""
    nb = notebook_json(data, name)
    cells = []
    for cell in nb["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            cells.append("".join(src) if isinstance(src, list) else str(src))
    return cells


def is_definition(node: ast.stmt) -> bool:
    """True for statements the grader runs: imports, defs, classes, UPPER_CASE constants."""
    if isinstance(node, _DEFINITIONS):
        return True
    if isinstance(node, ast.Assign):
        return all(_upper_case(t) for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id.isupper() and node.value is not None
    return False


def _upper_case(target: ast.expr) -> bool:
    """An assignment target of UPPER_CASE names only: ``A``, or unpacked, ``A, B = ...`` and ``(A, *B) = ...`` (a
    blind learner, session 36: ``RTOL, ATOL = 1e-3, 1e-4`` was skipped, and the NameError's hint said to use
    UPPER_CASE)."""
    if isinstance(target, ast.Starred):
        return _upper_case(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return bool(target.elts) and all(_upper_case(t) for t in target.elts)
    return isinstance(target, ast.Name) and target.id.isupper()


def _first_line(node: ast.stmt, source: str) -> str:
    line = source.splitlines()[node.lineno - 1].strip()
    return line if len(line) <= 70 else line[:67] + "..."


def load_cells(cells: list[str], module_name: str = "submission") -> Loaded:
    """Run the definitions of ``cells`` in a new module namespace."""
    module = types.ModuleType(module_name)
    # registered, as an imported module would be: torch 2.11's Dynamo imports the module of a class it traces
    # ("No module named 'submission'" when compiling a learner's nn.Module otherwise); 2.14's does not
    sys.modules[module_name] = module
    loaded = Loaded(namespace=module.__dict__, cells=len(cells))
    transformer = BoundedTransformer()  # turns %magics and !shell into plain calls, which are skipped
    for index, raw in enumerate(cells, start=1):
        try:
            source = transformer.transform_cell(raw)
        except CellRewriteError as exc:
            loaded.problems.append(f"code cell {index}: {exc}; nothing in that cell was loaded")
            continue
        filename = f"<code cell {index}>"  # grader.probing.where_in_notebook reads it
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            tree = ast.parse(source, filename)
        except SyntaxError as exc:
            where = f" on line {exc.lineno}" if exc.lineno else ""
            loaded.problems.append(
                f"code cell {index} has a syntax error{where}: {exc.msg}; nothing in that cell was loaded"
            )
            continue
        except (RecursionError, MemoryError, ValueError) as exc:  # nested too deep, a null byte: this cell only
            loaded.problems.append(
                f"code cell {index} could not be parsed ({type(exc).__name__}: {exc}); nothing in that cell was loaded"
            )
            continue
        for node in tree.body:
            if not is_definition(node):
                continue
            try:
                code = compile(ast.Module(body=[node], type_ignores=[]), filename, "exec")
                exec(code, loaded.namespace)
            except Exception as exc:  # noqa: BLE001 - any learner error becomes a message
                loaded.problems.append(
                    f"code cell {index}, line {node.lineno} `{_first_line(node, source)}` "
                    f"raised {type(exc).__name__}: {exc}"
                )
    return loaded


def load_notebook(path: str | Path) -> Loaded:
    """Read ``path`` and load its definitions (raises ``NotebookError`` if unreadable)."""
    return load_cells(read_cells(path))
