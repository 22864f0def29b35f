"""Load a notebook's definitions into a fresh module, skipping its demo cells.

Only top-level imports, ``def``/``class`` statements and UPPER_CASE constant
assignments run; calls, loops, plots, timing and training cells do not.  Each
statement runs on its own, so one broken cell costs only the names it defines.
"""

from __future__ import annotations

import ast
import json
import linecache
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from IPython.core.inputtransformer2 import TransformerManager

MAX_NOTEBOOK_BYTES = 200 * 1024**2
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class NotebookError(Exception):
    """The file is missing or is not a readable notebook."""


@dataclass
class Loaded:
    """The module built from a notebook, and what went wrong on the way."""

    namespace: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    cells: int = 0


def read_cells(path: str | Path) -> list[str]:
    """Source of every code cell, or ``NotebookError`` with a clear reason."""
    path = Path(path)
    if not path.is_file():
        raise NotebookError(f"notebook not found: {path}")
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(
            f"{path.name} is {path.stat().st_size / 1024**2:.0f} MiB, over the "
            f"{MAX_NOTEBOOK_BYTES / 1024**2:.0f} MiB limit: clear its outputs and submit again"
        )
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise NotebookError(f"{path.name} is not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"{path.name} is not valid notebook JSON (line {exc.lineno}: {exc.msg}); "
            "was it truncated or edited by hand?"
        ) from None
    except RecursionError:  # valid JSON nested deeper than Python's parser recurses: no editor writes that
        raise NotebookError(
            f"{path.name} nests its JSON deeper than a notebook ever does (lists or objects inside each other "
            "thousands of levels deep): it is not a Jupyter notebook as Jupyter writes it"
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{path.name} has no 'cells' list: it is not a Jupyter notebook")
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
        return all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id.isupper() and node.value is not None
    return False


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
    transformer = TransformerManager()  # turns %magics and !shell into plain calls, which are skipped
    for index, raw in enumerate(cells, start=1):
        source = transformer.transform_cell(raw)
        filename = f"<code cell {index}>"  # grader.probing.where_in_notebook reads it
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            tree = ast.parse(source, filename)
        except SyntaxError as exc:
            loaded.problems.append(
                f"code cell {index} has a syntax error on line {exc.lineno}: {exc.msg}; nothing in that cell was loaded"
            )
            continue
        for node in tree.body:
            if not is_definition(node):
                continue
            code = compile(ast.Module(body=[node], type_ignores=[]), filename, "exec")
            try:
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
